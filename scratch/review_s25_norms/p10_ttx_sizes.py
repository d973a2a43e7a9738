import sys; sys.path.insert(0, ".")
from h import probe
import torch, torch.nn.functional as F
torch.manual_seed(0)
bf, f32, f16 = torch.bfloat16, torch.float32, torch.float16
def llama(x, w):
    x32 = x.float(); return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
def gemma(x, w):
    x32 = x.float(); o = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6); return (o * (1.0 + w.float())).type_as(x)
def ds(x, w):
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype)
def add_gemma(x, r, w):
    h = x + r; return gemma(h, w), h
def ln(x, w, b): return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)
def ln_nob(x, w, b): return F.layer_norm(x, (x.shape[-1],), w, None, 1e-5)
def add_ln(x, r, w, b):
    h = x + r; return F.layer_norm(h, (h.shape[-1],), w, b, 1e-5), h
def sw(g, u): return F.gelu(g, approximate="tanh") * u
def fu(gu): a, b = gu.chunk(2, -1); return b * F.gelu(a)
o = {"target": "ttx"}
for H in (1, 3, 129, 4100):
    for dt, wdt in ((bf, bf), (f16, f16), (f32, f32), (bf, f32), (f16, f32), (f32, bf)):
        t = f"H={H} {dt}/{wdt}".replace("torch.", "")
        x = torch.randn(3, H).to(dt); r = torch.randn(3, H).to(dt); w = (1 + .3 * torch.randn(H)).to(wdt); b = torch.randn(H).to(wdt)
        probe(f"llama {t}", llama, (x, w), wrt=(0, 1), options=o)
        probe(f"gemma {t}", gemma, (x, w), wrt=(0, 1), options=o)
        probe(f"add_gemma {t}", add_gemma, (x, r, w), wrt=(0, 1, 2), options=o)
        if dt == wdt or dt != f32:
            probe(f"ln {t}", ln, (x, w, b), wrt=(0, 1, 2), options=o)
            probe(f"ln_nob {t}", ln_nob, (x, w, b), wrt=(0, 1), options=o)
            probe(f"add_ln {t}", add_ln, (x, r, w, b), wrt=(0, 1, 2, 3), options=o)
        if dt == wdt:
            probe(f"ds {t}", ds, (x, w), wrt=(0,), options=o)
            probe(f"sw {t}", sw, (x, r), wrt=(0, 1), options=o)
            probe(f"fu {t}", fu, (torch.randn(3, 2 * H).to(dt),), wrt=(0,), options=o)
