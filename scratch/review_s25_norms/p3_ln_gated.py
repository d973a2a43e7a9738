import sys; sys.path.insert(0, ".")
from h import probe
import torch, torch.nn.functional as F
torch.manual_seed(0)
H = 64
bf, f32, f16 = torch.bfloat16, torch.float32, torch.float16

def ln(x, w, b): return F.layer_norm(x, (H,), w, b, 1e-5)
def ln_nob(x, w, b): return F.layer_norm(x, (H,), w, None)
def ln_noaff(x, w, b): return F.layer_norm(x, (H,))
def ln2d(x, w, b): return F.layer_norm(x, x.shape[-2:])
def ln_mod_nobias(x, w, b):
    m = torch.nn.LayerNorm(H, bias=False).to(x.dtype); return m(x)
def cohere(x, w, b):
    h = x.to(torch.float32); mean = h.mean(-1, keepdim=True); var = (h - mean).pow(2).mean(-1, keepdim=True)
    h = (h - mean) * torch.rsqrt(var + 1e-5); h = w.to(torch.float32) * h; return h.to(x.dtype)
def cohere_unbiased(x, w, b):  # var with unbiased std
    h = x.to(torch.float32); mean = h.mean(-1, keepdim=True); var = h.var(-1, keepdim=True, unbiased=False)
    h = (h - mean) * torch.rsqrt(var + 1e-5); h = w.to(torch.float32) * h; return h.to(x.dtype)
def ln_wbias_swap(x, w, b): return F.layer_norm(x, (H,), b, w, 1e-5)
def ln_wide(x, w, b): return F.layer_norm(x, (H,), w * 2, b[None, :].squeeze(0), 1e-5)

for dt, wdt in ((bf, bf), (f32, f32), (bf, f32), (f16, f16), (f32, bf), (f16, f32)):
    tag = f"{dt}/{wdt}".replace("torch.", "")
    x = (3 + torch.randn(3, 5, H)).to(dt); w = (1 + 0.3 * torch.randn(H)).to(wdt); b = torch.randn(H).to(wdt)
    for fn in (ln, ln_nob, ln_noaff, ln2d, cohere, cohere_unbiased, ln_wbias_swap, ln_wide):
        probe(f"{fn.__name__} {tag}", fn, (x, w, b), wrt=(0, 1, 2))
    for fn in (ln_mod_nobias,):
        probe(f"{fn.__name__} {tag}", fn, (x, w, b), wrt=(0,))

def silu_g(g, u): return F.silu(g) * u
def sig_g(g, u): return g * torch.sigmoid(g) * u
def sig_g2(g, u): return (g * torch.sigmoid(g)) * u
def gelu_t(g, u): return F.gelu(g, approximate="tanh") * u
def gelu_e(g, u): return F.gelu(g) * u
def gelu_none_kw(g, u): return F.gelu(g, approximate="none") * u
def relu_g(g, u): return F.relu(g) * u
def relu2(g, u): return F.relu(g).square() * u
def up_first(g, u): return u * F.silu(g)
def silu_then_mul_scalar(g, u): return F.silu(g) * u * 0.5
def self_gate(g, u): return F.silu(g) * g
def chunk(gu, _): a, b = gu.chunk(2, -1); return F.silu(a) * b
def split(gu, _): a, b = gu.split(gu.shape[-1] // 2, -1); return F.silu(a) * b
def split_uneven(gu, _): a, b = gu.split([gu.shape[-1] // 2 - 2, gu.shape[-1] // 2 + 2], -1); return F.silu(a[..., :b.shape[-1]-4]) * b[..., 4:]
def chunk_dim0(gu, _): a, b = gu.chunk(2, 0); return F.silu(a) * b
def chunk_odd(gu, _): a, b = gu[..., :-1].chunk(2, -1); return F.silu(a) * b
def slices(gu, _): n = gu.shape[-1] // 2; return F.silu(gu[..., :n]) * gu[..., n:]
def slices_interleaved(gu, _): return F.silu(gu[..., ::2]) * gu[..., 1::2]
def unbind(gu, _): a, b = gu.unflatten(-1, (2, -1)).unbind(-2); return F.silu(a) * b
def chunk3(gu, _): a, b, c = gu.chunk(3, -1); return F.silu(a) * b
def chunk_gelu(gu, _): a, b = gu.chunk(2, -1); return b * F.gelu(a, approximate="tanh")
def silu_inplace(g, u): return F.silu(g.clone(), inplace=True) * u
def silu_mod_inplace(g, u): g = g * 1; torch.nn.SiLU(inplace=True)(g); return g * u

for dt in (bf, f32, f16, torch.float64):
    tag = str(dt).replace("torch.", "")
    g, u = torch.randn(3, 5, 2 * H).to(dt), torch.randn(3, 5, 2 * H).to(dt)
    for fn in (silu_g, sig_g, sig_g2, gelu_t, gelu_e, gelu_none_kw, relu_g, relu2, up_first, silu_then_mul_scalar,
               self_gate, silu_inplace, silu_mod_inplace):
        probe(f"{fn.__name__} {tag}", fn, (g, u), wrt=(0, 1))
    gu = torch.randn(3, 5, 2 * H + 2).to(dt)
    for fn in (chunk, split, split_uneven, chunk_dim0, chunk_odd, slices, slices_interleaved, unbind, chunk3, chunk_gelu):
        probe(f"{fn.__name__} {tag}", fn, (gu, None), wrt=(0,))
    probe(f"bcast {tag}", silu_g, (g, u[:1]), wrt=(0, 1))
    probe(f"mixed {tag}", silu_g, (g, u.float()), wrt=(0, 1))
