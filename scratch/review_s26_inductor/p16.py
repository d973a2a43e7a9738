from h import *
torch.manual_seed(0)
H = 32
def rms(x, w, eps=1e-6):
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
def add_then_mut_resid(x, r, w):
    r = x + r
    y = rms(r, w)
    r.mul_(2)
    return y, r
def inplace_resid_input(x, r, w):
    r.add_(x)
    return rms(r, w), r
def inplace_resid_input_after(x, r, w):
    r2 = r + x
    y = rms(r2, w)
    r.copy_(r2)
    return y
def brk_add_rms(x, r, w):
    r = x + r
    print("brk")
    y = rms(r, w)
    return y, r
def brk_add_rms2(x, r, w):
    r = x + r
    y = rms(r, w)
    print("brk")
    return y * 2 + r
x = torch.randn(2, 5, H); r = torch.randn(2, 5, H); w = (1 + 0.1 * torch.randn(H))
xg, rg, wg = [t.clone().requires_grad_() for t in (x, r, w)]
with torch.no_grad():
    for t in ["torch", "ttx"]:
        check(f"add_then_mut_resid nograd {t}", add_then_mut_resid, [x, r, w], t, grad=False)
        check(f"inplace_resid_input nograd {t}", inplace_resid_input, [x, r, w], t, grad=False)
        check(f"inplace_resid_input_after nograd {t}", inplace_resid_input_after, [x, r, w], t, grad=False)
for t in ["torch", "ttx"]:
    check(f"inplace_resid_input grad(x,w) {t}", inplace_resid_input, [xg, r, wg], t)
    check(f"inplace_resid_input_after grad {t}", inplace_resid_input_after, [xg, r, wg], t)
    check(f"brk_add_rms {t}", brk_add_rms, [xg, rg, wg], t)
    check(f"brk_add_rms2 {t}", brk_add_rms2, [xg, rg, wg], t)
