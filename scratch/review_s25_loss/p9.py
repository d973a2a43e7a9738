import conftest  # noqa
import copy
import torch, torch.nn as nn, torch.nn.functional as F
import torch.utils.checkpoint as ckpt
import mojo_compile, torch._dynamo
from h import rel
from p4 import Block, VOCAB, HID
class LM(nn.Module):
    def __init__(self, mode):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HID)
        self.blocks = nn.ModuleList(Block() for _ in range(3))
        self.head = nn.Linear(HID, VOCAB, bias=False)
        self.mode = mode
    def forward(self, ids, labels, n):
        x = self.embed(ids)
        for i, b in enumerate(self.blocks):
            if self.mode == "ckpt":
                x = ckpt.checkpoint(b, x, use_reentrant=False)
            else:
                x = b(x)
            if self.mode == "break" and i == 1:
                torch._dynamo.graph_break()
            if self.mode == "inplace_bufupd" and i == 0:
                self.count.add_(1) if hasattr(self, "count") else None
        z = self.head(x)
        loss = F.cross_entropy(z.float().view(-1, VOCAB), labels.view(-1), reduction="sum") / n
        if self.mode == "ret":
            return loss, z, x
        if self.mode == "zloss":
            return loss + 1e-3 * torch.logsumexp(z.float(), -1).square().mean()
        return loss
def go(mode, inner="inductor", dynamic=None):
    torch._dynamo.reset(); mojo_compile.reset_report()
    torch.manual_seed(0)
    m = LM(mode); e = copy.deepcopy(m); x = copy.deepcopy(m).double()
    c = torch.compile(m, backend="mojo", options={"backward_piece_mb": 1/1024, "inner_compiler": inner}, dynamic=dynamic)
    torch.manual_seed(1)
    data = [(torch.randint(0, VOCAB, (2, n)), torch.randint(0, VOCAB, (2, n))) for n in (7, 9)]
    out = []
    try:
        for mod, fn in ((m, c), (e, e), (x, x)):
            ls, extras = [], []
            for ids, lab in data:
                lab[0, :2] = -100
                nn_ = (lab != -100).sum()
                l = fn(ids, lab, nn_)
                if isinstance(l, tuple):
                    extras.append([t.detach().clone() for t in l[1:]]); l = l[0]
                l.backward(); ls.append(l.detach())
                if extras:
                    extras[-1] = (extras[-1], [t.detach() for t in fn(ids, lab, nn_)[1:]])
            out.append((ls, {n: p.grad for n, p in mod.named_parameters()}, extras))
    except Exception as ex:
        import traceback; traceback.print_exc()
        print(f"[{mode}] CRASH {type(ex).__name__}: {str(ex)[:400]}"); return
    info = [(gr.pieces, [s.pattern for s in gr.sites]) for gr in mojo_compile.last_report().graphs]
    bad = []
    for k in out[0][1]:
        a, b, t = out[0][1][k], out[1][1][k], out[2][1][k]
        if rel(a, t) > 2 * rel(b, t) + 1e-5: bad.append((k, rel(a, t), rel(b, t)))
    for a, b, t in zip(out[0][0], out[1][0], out[2][0]):
        if rel(a, t) > 2 * rel(b, t) + 1e-6: bad.append(("loss", rel(a, t), rel(b, t)))
    print(f"[{mode}] {info} bad={bad}")
for mode in ("ckpt", "break", "ret", "zloss", "plain"):
    go(mode)
go("plain", dynamic=True)
