from h import *
import torch.nn.functional as F
torch.manual_seed(0)
H = 32
def f(x, w, wg, wu, q, k, v):
    x32 = x.float()
    h = w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
    m = F.silu(F.linear(h, wg)) * F.linear(h, wu)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return m, o
x = torch.randn(2, 5, H, requires_grad=True); w = (1 + 0.1 * torch.randn(H)).requires_grad_()
wg, wu = [(0.2 * torch.randn(48, H)).requires_grad_() for _ in range(2)]
q, k, v = [torch.randn(1, 2, 6, 16, requires_grad=True) for _ in range(3)]
for t in sys.argv[1].split(","):
    check(f"cpp_wrapper {t}", f, [x, w, wg, wu, q, k, v], t, options={"cpp_wrapper": True})
    with torch.no_grad():
        check(f"cpp_wrapper nograd {t}", f, [x.detach(), w.detach(), wg.detach(), wu.detach(), q.detach(), k.detach(), v.detach()], t, grad=False, options={"cpp_wrapper": True})
