from h import *
import torch.nn.functional as F
torch.manual_seed(0)
H = 32
def rms(x, w, eps=1e-6):
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
def gated_mut_after(g, u):
    y = F.silu(g) * u
    g.mul_(2)
    return y
def rms_w_mut_after(x, w):
    y = rms(x, w)
    x.mul_(2)
    return y
def ln_mut_after(x, w, b):
    y = F.layer_norm(x, (H,), w, b, 1e-5)
    x.mul_(2)
    return y
def rope_like_mut(q, cos, sin):
    def rot(t): return torch.cat((-t[..., t.shape[-1]//2:], t[..., :t.shape[-1]//2]), -1)
    y = q * cos + rot(q) * sin
    q.mul_(2)
    return y
def sdpa_mut_after(q, k, v):
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    k.mul_(2)
    return o
g = torch.randn(2, 5, H); u = torch.randn(2, 5, H, requires_grad=True)
x = torch.randn(2, 5, H); w = (1 + 0.1 * torch.randn(H)).requires_grad_(); b = (0.1 * torch.randn(H)).requires_grad_()
q, k = torch.randn(1, 2, 6, 16), torch.randn(1, 2, 6, 16); v = torch.randn(1, 2, 6, 16, requires_grad=True)
for target in ["torch", "ttx"]:
    for inner in ["inductor", "eager"]:
        o = {"inner_compiler": inner}
        check(f"gated_mut_after {target}/{inner}", gated_mut_after, [g, u], target, options=o)
        check(f"rms_w_mut_after {target}/{inner}", rms_w_mut_after, [x, w], target, options=o)
        check(f"ln_mut_after {target}/{inner}", ln_mut_after, [x, w, b], target, options=o)
        check(f"sdpa_mut_after {target}/{inner}", sdpa_mut_after, [q, k, v], target, options=o)
