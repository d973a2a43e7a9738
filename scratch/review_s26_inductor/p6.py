from h import *
import torch.nn.functional as F
torch.manual_seed(0)
H = 32
def rms(x, w, eps=1e-6):
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
def lin(x, w, wg):
    return F.linear(rms(x, w), wg)
def just(x, w):
    return rms(x, w)
x = torch.randn(2, 5, H, requires_grad=True); w = (1 + 0.1 * torch.randn(H)).requires_grad_()
wg = (0.2 * torch.randn(48, H)).requires_grad_()
for inner in ["eager", "inductor"]:
    check(f"just dyn {inner}", just, [x, w], "torch", options={"inner_compiler": inner}, dynamic=True)
    check(f"lin dyn {inner}", lin, [x, w, wg], "torch", options={"inner_compiler": inner}, dynamic=True)
    for g in mojo_compile.last_report().graphs: print(g.notes, [ (m.pattern, m.reason) for m in g.near_misses][:3])
