import conftest  # noqa
import math, sys, torch
from mojo_compile import debug
if sys.argv[1] == "sqrtlog":
    orig = debug._worst_element
    debug._worst_element = lambda fu, ea, ex, f, e, x, bound: orig(fu, ea, ex, f, e, x,
                                                                    bound * max(1.0, math.sqrt(2 * math.log(max(f.numel(), 2)))))
torch.manual_seed(int(sys.argv[2]))
x = torch.randn(256, 512, requires_grad=True)
res = debug.verify(torch.nn.RMSNorm(512), x, grad=True, options={"inner_compiler": "eager", "target": sys.argv[3]})
print(sys.argv[1:], [(c.what, c.ok, f"{c.elem:.2f}") for c in res.checks])
