import conftest  # noqa
import sys, torch
from mojo_compile import debug
torch.manual_seed(int(sys.argv[1]))
norm = torch.nn.RMSNorm(512) if sys.argv[2] == "rms" else torch.nn.LayerNorm(512)
x = torch.randn(256, 512, requires_grad=True)
res = debug.verify(norm, x, grad=True, options={"inner_compiler": "eager", "target": sys.argv[3]})
print([(c.what, c.ok, f"{c.elem:.2f}", f"{c.err:.1e}") for c in res.checks])
