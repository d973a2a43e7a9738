import sys; sys.path.insert(0, ".")
from h import probe
import torch, torch.nn.functional as F
torch.manual_seed(0)
H = 64
bf, f32 = torch.bfloat16, torch.float32

def norm(h, w):
    h32 = h.float(); return w * (h32 * torch.rsqrt(h32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(h.dtype)
def ret(x, r, w):
    h = x + r; return norm(h, w), h
def reuse(x, r, w):
    h = x + r; y = norm(h, w); return y * 2 + h
def unused(x, r, w):
    return norm(x + r, w)
def inplace(x, r, w):
    r = r.clone(); r += x; return norm(r, w), r
def inplace_input(x, r, w):
    r += x; return norm(r, w)
def inplace_after(x, r, w):
    h = x + r; y = norm(h, w); h.mul_(2); return y, h
def alias_self(x, r, w):
    h = x + x; return norm(h, w), h
def fp32_sum(x, r, w):
    h = x.float() + r.float(); y = norm(h, w); return y.to(x.dtype), h.to(x.dtype)
def sum_fp32_res(x, r, w):
    h = x + r.float(); return norm(h, w), h
def radd(x, r, w):
    h = r + x; return norm(h, w), h
def alpha(x, r, w):
    h = torch.add(x, r, alpha=2); return norm(h, w), h
def sub(x, r, w):
    h = x - r; return norm(h, w), h
def view_res(x, r, w):
    h = x + r; return norm(h, w), h.view(-1, H)
def two_norms(x, r, w):
    h = x + r; a = norm(h, w); h2 = h + a; return norm(h2, w), h2
def ln_ret(x, r, w):
    h = x + r; return F.layer_norm(h, (H,), w, None, 1e-5), h
def ln_inplace(x, r, w):
    h = x + r; y = F.layer_norm(h, (H,), w, w, 1e-5); h.add_(1); return y, h
def ln_inplace_input(x, r, w):
    r += x; return F.layer_norm(r, (H,), w, w, 1e-5)
def add_then_inplace_x(x, r, w):  # x written in place after the add
    h = x + r; y = norm(h, w); x.mul_(2); return y, h

for dt, wdt in ((bf, bf), (f32, f32), (bf, f32)):
    tag = f"{dt}/{wdt}".replace("torch.", "")
    for fn in (ret, reuse, unused, inplace, inplace_after, alias_self, fp32_sum, sum_fp32_res, radd, alpha, sub,
               view_res, two_norms, ln_ret, ln_inplace):
        x = torch.randn(3, 5, H).to(dt); r = torch.randn(3, 5, H).to(dt); w = (1 + 0.3 * torch.randn(H)).to(wdt)
        probe(f"{fn.__name__} {tag}", fn, (x, r, w), wrt=(0, 1, 2))
    for fn in (inplace_input, ln_inplace_input, add_then_inplace_x):
        x = torch.randn(3, 5, H).to(dt); r = torch.randn(3, 5, H).to(dt); w = (1 + 0.3 * torch.randn(H)).to(wdt)
        probe(f"{fn.__name__} {tag}", fn, (x, r, w), wrt=())
