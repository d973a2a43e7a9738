import conftest  # noqa
import sys, copy
import torch, torch.nn as nn, torch.nn.functional as F
import mojo_compile, torch._dynamo
from h import rel
VOCAB, HID = 50, 64
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.RMSNorm(HID, eps=1e-6)
        self.fc1 = nn.Linear(HID, 96, bias=False); self.fc2 = nn.Linear(96, HID, bias=False)
    def forward(self, x):
        return x + self.fc2(F.silu(self.fc1(self.norm(x))))
class LM(nn.Module):
    def __init__(self, tied=False, bias=False, smoothing=0.0, dtype=torch.float32, ret_logits=False, softcap=None, ign=-100, red="mean"):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HID)
        self.blocks = nn.ModuleList(Block() for _ in range(3))
        self.head = nn.Linear(HID, VOCAB, bias=bias)
        if tied: self.head.weight = self.embed.weight
        self.smoothing, self.ret, self.softcap, self.ign, self.red = smoothing, ret_logits, softcap, ign, red
    def forward(self, ids, labels):
        x = self.embed(ids)
        for b in self.blocks: x = b(x)
        z = self.head(x)
        if self.softcap: z = torch.tanh(z / self.softcap) * self.softcap
        loss = F.cross_entropy(z.float().view(-1, VOCAB), labels.view(-1), label_smoothing=self.smoothing, ignore_index=self.ign, reduction=self.red)
        if self.red == "sum": loss = loss / 9
        return (loss, z) if self.ret else loss
def go(name, inner="inductor", dynamic=None, piece_mb=1/1024, steps=2, dtype=torch.float32, **kw):
    torch._dynamo.reset(); mojo_compile.reset_report()
    torch.manual_seed(0)
    m = LM(**kw).to(dtype); e = copy.deepcopy(m); x = copy.deepcopy(m).double()
    c = torch.compile(m, backend="mojo", options={"backward_piece_mb": piece_mb, "inner_compiler": inner}, dynamic=dynamic)
    torch.manual_seed(1)
    data = [(torch.randint(0, VOCAB, (2, n)), torch.randint(0, VOCAB, (2, n))) for n in (7, 9)[:steps]]
    for ids, lab in data: lab[0, :2] = kw.get("ign", -100)
    out = []
    try:
        for mod, fn in ((m, c), (e, e), (x, x)):
            ls = []
            for ids, lab in data:
                l = fn(ids, lab); l = l[0] if isinstance(l, tuple) else l
                l.backward(); ls.append(l.detach())
            out.append((ls, {n: p.grad for n, p in mod.named_parameters()}))
    except Exception as ex:
        print(f"[{name}] CRASH {type(ex).__name__}: {str(ex)[:400]}"); return
    g = mojo_compile.last_report().graphs
    info = [(gr.pieces, [s.pattern for s in gr.sites]) for gr in g]
    bad = []
    for k in out[0][1]:
        a, b, t = out[0][1][k], out[1][1][k], out[2][1][k]
        if rel(a, t) > 2 * rel(b, t) + 1e-5: bad.append((k, rel(a, t), rel(b, t)))
    for a, b, t in zip(out[0][0], out[1][0], out[2][0]):
        if rel(a, t) > 2 * rel(b, t) + 1e-6: bad.append(("loss", rel(a, t), rel(b, t)))
    print(f"[{name}] {info} bad={bad}")
if __name__ == "__main__":
    go("base")
    go("tied", tied=True)
    go("bias", bias=True)
    go("ls_ign0", smoothing=0.1, ign=0)
    go("ret_logits", ret_logits=True)
    go("softcap", softcap=30.0)
    go("sum", red="sum")
    go("dyn", dynamic=True)
    go("tied_dyn_eager", tied=True, dynamic=True, inner="eager")
    go("bf16", dtype=torch.bfloat16)
