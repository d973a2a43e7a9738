from h import *
import torch.nn.functional as F
torch.manual_seed(0)
H = 32
def ln_mut_after(x, w, b):
    y = F.layer_norm(x, (H,), w, b, 1e-5)
    x.mul_(2)
    return y
def sdpa_mut_after(q, k, v):
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    k.mul_(2)
    return o
x = torch.randn(2, 5, H); w = (1 + 0.1 * torch.randn(H)).requires_grad_(); b = (0.1 * torch.randn(H)).requires_grad_()
q, k = torch.randn(1, 2, 6, 16), torch.randn(1, 2, 6, 16); v = torch.randn(1, 2, 6, 16, requires_grad=True)
versus("ln_mut_after", ln_mut_after, [x, w, b])
versus("sdpa_mut_after", sdpa_mut_after, [q, k, v])
