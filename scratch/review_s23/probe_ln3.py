import conftest  # noqa
import torch
from mojo_compile import debug
orig = debug._worst_element
def spy(fused, eager, exact, f, e, x, bound):
    r = orig(fused, eager, exact, f, e, x, bound)
    if r[0] > 1:
        print("SPY shape", tuple(f.shape), "rms x", x.pow(2).mean().sqrt().item(), "max|x|", x.abs().max().item(),
              "rms err eager", (e - x).pow(2).mean().sqrt().item(), "rms err fused", (f - x).pow(2).mean().sqrt().item(),
              "bound", bound, r)
    return r
debug._worst_element = spy
torch.manual_seed(0)
rms = torch.nn.RMSNorm(512)
x = (1000 + torch.randn(256, 512)).requires_grad_()
res = debug.verify(lambda x: rms(x - 1000), x, grad=True, options={"inner_compiler": "eager", "target": "torch"})
print([(c.what, c.ok) for c in res.checks])
