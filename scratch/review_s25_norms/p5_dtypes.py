import sys; sys.path.insert(0, ".")
from h import probe
import torch, torch.nn.functional as F
torch.manual_seed(0)
H = 64
bf, f32, f16 = torch.bfloat16, torch.float32, torch.float16

def compute_bf16(x, w):  # fp16 x normalised in bf16
    x32 = x.to(bf); return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
def compute_f64(x, w):
    x32 = x.double(); return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
def back_to_f16(x, w):  # bf16 x, cast back to fp16
    x32 = x.float(); return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(f16)
def back_to_w(x, w):  # cast back to the weight's dtype (T5 style)
    x32 = x.float(); return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(w.dtype)
def output_cast_f16(x, w):
    x32 = x.float(); return (w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6))).to(f16)
def no_cast_back(x, w):
    x32 = x.float(); return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6))
def unweighted_f16(x, w):
    x32 = x.float(); return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(f16)
def ds_v4_f16(x, w):
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(f16)
def ds_v4_f32(x, w):
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
def gemma_w16(x, w):
    x32 = x.float(); o = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6); return (o * (1.0 + w.to(f16))).to(x.dtype)
def ln_f16_cast(x, w):
    return F.layer_norm(x.float(), (H,), w.float(), None, 1e-5).to(f16)
def cohere_f16(x, w):
    h = x.to(torch.float32); mean = h.mean(-1, keepdim=True); var = (h - mean).pow(2).mean(-1, keepdim=True)
    h = (h - mean) * torch.rsqrt(var + 1e-5); h = w.to(torch.float32) * h; return h.to(f16)
def cohere_bf16_compute(x, w):
    h = x.to(bf); mean = h.mean(-1, keepdim=True); var = (h - mean).pow(2).mean(-1, keepdim=True)
    h = (h - mean) * torch.rsqrt(var + 1e-5); h = w.to(bf) * h; return h.to(x.dtype)

for dt, wdt in ((bf, bf), (f16, f16), (f32, f32), (bf, f32), (f32, bf), (f16, f32)):
    tag = f"{dt}/{wdt}".replace("torch.", "")
    x = torch.randn(3, 5, H).to(dt); w = (1 + 0.3 * torch.randn(H)).to(wdt)
    for fn in (compute_bf16, compute_f64, back_to_f16, back_to_w, output_cast_f16, no_cast_back, unweighted_f16, ds_v4_f16,
               ds_v4_f32, gemma_w16, ln_f16_cast, cohere_f16, cohere_bf16_compute):
        probe(f"{fn.__name__} {tag}", fn, (x, w), wrt=(0, 1))
