import sys; sys.path.insert(0, ".")
from h import probe
import torch, torch.nn.functional as F
torch.manual_seed(0)
H = 64
bf, f32 = torch.bfloat16, torch.float32

def llama(x, w, eps=1e-6):
    x32 = x.float(); return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
def xx(x, w):
    x32 = x.float(); return w * (x32 * torch.rsqrt((x32 * x32).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
def sumN(x, w):
    x32 = x.float(); return w * (x32 * torch.rsqrt(x32.pow(2).sum(-1, keepdim=True) / x.shape[-1] + 1e-6)).to(x.dtype)
def inv_sqrt(x, w):
    x32 = x.float(); return w * (x32 / torch.sqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
def nonlast(x, w):  # norm over dim 1
    x32 = x.float(); return (x32 * torch.rsqrt(x32.pow(2).mean(1, keepdim=True) + 1e-6)).to(x.dtype)
def no_keepdim(x, w):
    x32 = x.float(); return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1) + 1e-6).unsqueeze(-1)).to(x.dtype)
def gemma(x, w):
    x32 = x.float(); o = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6); return (o * (1.0 + w.float())).type_as(x)
def gemma_bf16_offset(x, w):  # offset added in bf16
    x32 = x.float(); o = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)); return (o * (1.0 + w)).type_as(x)
def t5(x, w):  # T5: variance in fp32, x stays in x dtype, weight cast
    var = x.to(torch.float32).pow(2).mean(-1, keepdim=True); h = x * torch.rsqrt(var + 1e-6)
    if w.dtype in (torch.float16, torch.bfloat16): h = h.to(w.dtype)
    return w * h
def eps_tensor(x, w, e):
    x32 = x.float(); return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + e)).to(x.dtype)
def eps_int(x, w):
    x32 = x.float(); return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1)).to(x.dtype)
def square_fn(x, w):
    x32 = x.float(); return w * (x32 * torch.rsqrt(torch.square(x32).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
def mean_dtype(x, w):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True, dtype=torch.float32) + 1e-6)).to(x.dtype)
def pow_half(x, w):
    x32 = x.float(); return w * (x32 * torch.pow(x32.pow(2).mean(-1, keepdim=True) + 1e-6, -0.5)).to(x.dtype)
def frms(x, w): return F.rms_norm(x, (x.shape[-1],), w)
def frms_eps(x, w): return F.rms_norm(x, (x.shape[-1],), w, 1e-6)
def frms2d(x, w2): return F.rms_norm(x, x.shape[-2:], w2, 1e-6)
def mean_neg(x, w):  # mean over dim x.dim()-1 positive
    x32 = x.float(); return w * (x32 * torch.rsqrt(x32.pow(2).mean(2, keepdim=True) + 1e-6)).to(x.dtype)
def rsqrt_neg_eps(x, w):
    x32 = x.float(); return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) - 1e-6)).to(x.dtype)
def sub_eps(x, w):
    x32 = x.float(); return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True).add(1e-6, alpha=2))).to(x.dtype)
def pow3(x, w):
    x32 = x.float(); return w * (x32 * torch.rsqrt(x32.abs().pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
def sqrt_recip(x, w):
    x32 = x.float(); return w * (x32 * torch.sqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6).reciprocal()).to(x.dtype)
def rstd_mul_order(x, w):
    x32 = x.float(); return w * (torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6) * x32).to(x.dtype)

for dt, wdt in ((bf, bf), (f32, f32), (bf, f32), (torch.float16, bf), (bf, torch.float16), (f32, bf)):
    x = torch.randn(3, 5, H).to(dt); w = (1 + 0.3 * torch.randn(H)).to(wdt)
    tag = f"{dt}/{wdt}".replace("torch.", "")
    for fn in (llama, xx, sumN, inv_sqrt, nonlast, no_keepdim, gemma, gemma_bf16_offset, t5, eps_int, square_fn,
               mean_dtype, pow_half, frms, frms_eps, mean_neg, rsqrt_neg_eps, sub_eps, pow3, sqrt_recip, rstd_mul_order):
        probe(f"{fn.__name__} {tag}", fn, (x, w), wrt=(0, 1))
    probe(f"eps_tensor {tag}", eps_tensor, (x, w, torch.tensor(1e-6)), wrt=(0, 1))
    probe(f"frms2d {tag}", frms2d, (x, torch.randn(5, H).to(wdt)), wrt=(0, 1))
