import conftest  # noqa
import torch
torch.manual_seed(0)
rms = torch.nn.RMSNorm(512)
x = (1000 + torch.randn(256, 512)).requires_grad_()
s = x - 1000
s.retain_grad()
y = rms(s); g = torch.randn_like(y); y.backward(g)
xd = x.detach().double().requires_grad_(); sd = xd - 1000; sd.retain_grad()
yd = torch.nn.functional.rms_norm(sd, (512,), rms.weight.double(), eps=torch.finfo(torch.float32).eps); yd.backward(g.double())
print("rms grad", s.grad.pow(2).mean().sqrt().item(), "eager rel err", ((s.grad.double()-sd.grad).norm()/sd.grad.norm()).item())
print("x in fp32 - 1000 rms:", s.pow(2).mean().sqrt().item())
