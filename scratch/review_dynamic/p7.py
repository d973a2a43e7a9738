from h import *
import sys, torch.nn.functional as F
T = sys.argv[1]
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(40, 40, dtype=torch.bool)))
    def forward(self, q, k, v):
        s = q.shape[2]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias[:s, :s][None, None])
G = torch.tril(torch.ones(40, 40, dtype=torch.bool))
def fglob(q, k, v):
    s = q.shape[2]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=G[:s, :s][None, None])
for dyn in (False, None, True):
    for which in ("module", "global"):
        torch._dynamo.reset(); mojo_compile.reset_report()
        m = M(); G.copy_(torch.tril(torch.ones(40, 40, dtype=torch.bool)))
        f = m if which == "module" else fglob
        cf = torch.compile(f, backend="mojo", dynamic=dyn, options={"target": T, "inner_compiler": "eager"})
        res = []
        for S, mutate in ((7, False), (9, False), (9, True), (11, True)):
            if mutate:
                (m.bias if which == "module" else G).fill_(True)  # no mask any more
            q, k, v = (torch.randn(2, 2, S, 8) for _ in range(3))
            res.append(round(err(cf(q, k, v), f(q, k, v)), 8))
        print(which, dyn, res, [s.detail for s in mojo_compile.last_report().sites])
