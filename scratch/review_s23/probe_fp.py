import conftest  # noqa
import sys, torch, mojo_compile
from mojo_compile import debug
dtype = getattr(torch, sys.argv[1]); r = float(sys.argv[2])
def search(x):
    return torch.sigmoid(x) * 3.0
def wrong(x):
    y = torch.sigmoid(x.float()) * 3.0
    bump = (torch.arange(y.numel(), device=y.device).view(y.shape) == 5).to(y.dtype) * REL
    return (y * (1 + bump)).to(x.dtype)
wrong.__globals__["REL"] = r
mojo_compile.register_pattern("user.sig3", search, wrong, [(torch.randn(4, 8, dtype=dtype),)])
torch.manual_seed(0)
x = torch.randn(64, 256, dtype=dtype)
res = debug.verify(lambda x: search(x), x, options={"inner_compiler": "eager", "target": "torch"})
print("SITES", [c.pattern for c in res.checks])
for c in res.checks: print(c.what, c.ok, c.reason(), f"elem={c.elem:.3f} err={c.err:.2e} bound={c.bound:.2e}", c.element)
