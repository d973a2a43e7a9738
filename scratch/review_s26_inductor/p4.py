from h import *
import torch.nn.functional as F
torch.manual_seed(0)
H = 32
def rms(x, w, eps=1e-6):
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
def mlp(x, w, wg, wu, wd):
    h = rms(x, w)
    return F.linear(F.silu(F.linear(h, wg)) * F.linear(h, wu), wd)
def brk_print(x, w, wg):
    h = rms(x, w)
    print("break")
    return F.linear(h, wg)
def brk_item(x, w, wg):
    x32 = x.float()
    ms = x32.pow(2).mean(-1, keepdim=True)
    s = ms.sum().item()
    y = w * (x32 * torch.rsqrt(ms + 1e-6)).to(x.dtype)
    return y * s
def brk_mid(x, w):
    x32 = x.float()
    r = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)
    torch._dynamo.graph_break()
    return w * (x32 * r).to(x.dtype)
x = torch.randn(2, 5, H, requires_grad=True); w = (1 + 0.1 * torch.randn(H)).requires_grad_()
wg, wu = [(0.2 * torch.randn(48, H)).requires_grad_() for _ in range(2)]; wd = (0.2*torch.randn(H, 48)).requires_grad_()
for target in ["torch", "ttx"]:
    check(f"mlp max_autotune {target}", mlp, [x, w, wg, wu, wd], target, options={"max_autotune": True})
    check(f"mlp reduce-overhead {target}", mlp, [x, w, wg, wu, wd], target, mode="reduce-overhead")
    check(f"mlp max-autotune-no-cudagraphs {target}", mlp, [x, w, wg, wu, wd], target, mode="max-autotune-no-cudagraphs")
    check(f"mlp coordinate_descent+fallback_random {target}", mlp, [x, w, wg, wu, wd], target, options={"coordinate_descent_tuning": True, "fallback_random": True})
    check(f"mlp freezing {target}", mlp, [x, w, wg, wu, wd], target, options={"freezing": True})
    check(f"mlp dynamic {target}", mlp, [x, w, wg, wu, wd], target, dynamic=True)
    check(f"brk_print {target}", brk_print, [x, w, wg], target)
    check(f"brk_item {target}", brk_item, [x, w, wg], target)
    check(f"brk_mid {target}", brk_mid, [x, w], target)
