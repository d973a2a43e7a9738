import conftest  # noqa
import sys, torch
from mojo_compile import debug
torch.manual_seed(int(sys.argv[3]))
dtype = getattr(torch, sys.argv[2]); off = float(sys.argv[4])
ln = torch.nn.LayerNorm(512).to(dtype)
rms = torch.nn.RMSNorm(512).to(dtype)
x = (off + torch.randn(256, 512)).to(dtype).requires_grad_()
f = lambda x: (ln(x), rms(x - off))
res = debug.verify(f, x, grad=True, options={"inner_compiler": "eager", "target": sys.argv[1]})
for c in res.checks:
    if not c.ok or c.elem > 0.5: print(c.pattern, c.what, c.ok, c.reason(), f"elem={c.elem:.2f} err={c.err:.2e} bound={c.bound:.2e}")
print("N", len(res.checks), "FAIL", len(res.failures))
