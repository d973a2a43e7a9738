import conftest  # noqa
import torch, torch.nn.functional as F, mojo_compile
torch.manual_seed(0)
V = 37
def logit_mut(x, t):
    y = x * 1
    xf = y.float()
    y.mul_(2)
    return F.cross_entropy(xf.view(-1, V), t)
x = (torch.randn(2,5,V)*3).bfloat16(); t = torch.randint(0, V, (10,))
c = torch.compile(logit_mut, backend="mojo", options={"inner_compiler": "eager"})
print(c(x, t).item(), logit_mut(x, t).item(), [s.pattern for s in mojo_compile.last_report().sites])
