import conftest  # noqa
import sys, torch, torch.nn as nn, torch.nn.functional as F
from mojo_compile import debug
target, dtype, hidden, rows = sys.argv[1], getattr(torch, sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
grad = len(sys.argv) > 5 and sys.argv[5] == "grad"
torch.manual_seed(int(sys.argv[6]) if len(sys.argv) > 6 else 0)
class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.ln = nn.LayerNorm(hidden); s.w = nn.Parameter(1 + 0.1 * torch.randn(hidden))
        s.up = nn.Linear(hidden, 2 * hidden, bias=False); s.head = nn.Linear(hidden, 97)
    def forward(s, x, r, t):
        h = x + r
        v = h.float().pow(2).mean(-1, keepdim=True)
        n = s.w * (h.float() * torch.rsqrt(v + 1e-6)).to(x.dtype)
        g, u = s.up(n).chunk(2, -1)
        a = F.silu(g) * u
        y = s.ln(a + n)
        z = F.gelu(y, approximate="tanh") * y
        return F.cross_entropy(s.head(z).float().view(-1, 97), t), z
m = Block().to(dtype)
x = torch.randn(rows, hidden, dtype=dtype, requires_grad=grad); r = torch.randn(rows, hidden, dtype=dtype)
t = torch.randint(0, 97, (rows,))
res = debug.verify(m, x, r, t, grad=grad, options={"inner_compiler": "eager", "target": target})
fails = [c for c in res.checks if not c.ok]
print("SITES", sorted({c.pattern for c in res.checks}))
print("N", len(res.checks), "FAIL", len(fails))
for c in fails: print("F", c.site, c.pattern, c.what, c.dtype, c.reason(), c.err, c.bound)
