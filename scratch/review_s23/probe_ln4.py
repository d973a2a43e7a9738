import conftest  # noqa
import torch
from mojo_compile import debug
A = debug._ActiveWatch
orig = A._grad_checks
def spy(self, base):
    for sites, region in self._sites():
        print("REGION inputs", [n.name for n in region.inputs], "replaced", [str(o) for o in region.replaced])
    names = debug._by_name(self.before)
    for k in ("sub", "arg1_1", "arg0_1"):
        v = base[names[k]]; print(k, v.shape, v.float().mean().item(), v.float().std().item())
    return orig(self, base)
A._grad_checks = spy
torch.manual_seed(0)
rms = torch.nn.RMSNorm(512)
x = (1000 + torch.randn(256, 512)).requires_grad_()
res = debug.verify(lambda x: rms(x - 1000), x, grad=True, options={"inner_compiler": "eager", "target": "torch"})
