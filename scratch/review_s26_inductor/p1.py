from h import *
import torch.nn.functional as F
torch.manual_seed(0)
H = 32
def rms(x, w, eps=1e-6):
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)

def f_rms_inplace(x, w):
    y = rms(x, w); y.add_(1); return y
def f_addrms_resid(x, r, w):
    r = r + x
    y = rms(r, w)
    return y * 2, r + 1
def f_addrms_resid_inplace(x, r, w):
    r = r + x
    y = rms(r, w)
    r += y  # residual += pattern
    return r
def f_premul(x, w):
    x = x * 1.0
    x.mul_(2)
    return rms(x, w)
def f_graph_input_mutated(x, w):
    y = rms(x, w)
    x.add_(1)
    return y
def f_graph_input_mutated_before(x, w):
    x.mul_(3)
    return rms(x, w)
def f_ln_inplace(x, w, b):
    y = F.layer_norm(x, (H,), w, b, 1e-5); y.mul_(2); return y
def f_swiglu(g, u):
    y = F.silu(g) * u; y.add_(1); return y
def f_view_out(x, w):
    y = rms(x, w); return y, y.view(-1), y[0]

x = torch.randn(2, 5, H); r = torch.randn(2, 5, H); w = (1 + 0.1 * torch.randn(H))
b = 0.1 * torch.randn(H)
for target in ["torch", "ttx"]:
    xr, rr, wr, br = [t.clone().requires_grad_() for t in (x, r, w, b)]
    check(f"rms_inplace/{target}", f_rms_inplace, [xr, wr], target)
    check(f"addrms_resid/{target}", f_addrms_resid, [xr, rr, wr], target)
    check(f"addrms_resid_inplace/{target}", f_addrms_resid_inplace, [xr, rr, wr], target)
    check(f"premul/{target}", f_premul, [xr, wr], target)
    check(f"input_mut_after/{target}", f_graph_input_mutated, [x.clone(), w.clone()], target)
    check(f"input_mut_before/{target}", f_graph_input_mutated_before, [x.clone(), w.clone()], target)
    check(f"ln_inplace/{target}", f_ln_inplace, [xr, wr, br], target)
    check(f"swiglu_inplace/{target}", f_swiglu, [xr, rr], target)
    check(f"view_out/{target}", f_view_out, [xr, wr], target)
