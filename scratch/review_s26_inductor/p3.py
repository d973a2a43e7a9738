from h import *
import torch.nn.functional as F
torch.manual_seed(0)
H = 32
def rms_eps(x, w, eps):
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
def ln_eps(x, w, b, eps):
    return F.layer_norm(x, (H,), w, b, eps)
def attn_scale(q, k, v, scale):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
def attn_manual(q, k, v, scale):
    s = q @ k.transpose(-1, -2) * scale
    m = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    s = s.masked_fill(~m, float("-inf"))
    return s.softmax(-1) @ v
def rms_eps_tensor(x, w, eps_t):
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps_t)).to(x.dtype)

x = torch.randn(2, 5, H, requires_grad=True); w = (1 + 0.1 * torch.randn(H)).requires_grad_(); b = (0.1*torch.randn(H)).requires_grad_()
xb = x.detach().bfloat16().requires_grad_(); wb = w.detach().bfloat16().requires_grad_()
q, k, v = [torch.randn(1, 2, 6, 16, requires_grad=True) for _ in range(3)]
for target in ["torch", "ttx"]:
    for dyn in [None, True]:
        tag = f"{target}/dyn={dyn}"
        check(f"rms eps=0.1 {tag}", rms_eps, [x, w, 0.1], target, dynamic=dyn)
        check(f"rms eps=1e-6 bf16 {tag}", rms_eps, [xb, wb, 1e-6], target, dynamic=dyn)
        check(f"ln eps=0.3 {tag}", ln_eps, [x, w, b, 0.3], target, dynamic=dyn)
        check(f"sdpa scale=0.37 {tag}", attn_scale, [q, k, v, 0.37], target, dynamic=dyn)
        check(f"manual attn scale=0.37 {tag}", attn_manual, [q, k, v, 0.37], target, dynamic=dyn)
        check(f"rms eps 0-dim tensor {tag}", rms_eps_tensor, [x, w, torch.tensor(0.1)], target, dynamic=dyn)
        check(f"rms eps 0-dim fp64 tensor {tag}", rms_eps_tensor, [x, w, torch.tensor(0.1, dtype=torch.float64)], target, dynamic=dyn)
