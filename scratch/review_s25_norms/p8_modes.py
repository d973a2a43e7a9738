import sys; sys.path.insert(0, ".")
from h import probe
import torch, torch.nn.functional as F
torch.manual_seed(0)
H = 37
bf, f32 = torch.bfloat16, torch.float32

def llama(x, w):
    x32 = x.float(); return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
def add_llama(x, r, w):
    h = x + r; return llama(h, w), h
def ln(x, w, b): return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)
def add_ln(x, r, w, b):
    h = x + r; return F.layer_norm(h, (H,), w, b, 1e-5), h
def swiglu(g, u): return F.silu(g) * u
def fused(gu): a, b = gu.chunk(2, -1); return F.silu(a) * b
def ac(fn):
    def f(*a):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return fn(*a)
    f.__name__ = "autocast_" + fn.__name__
    return f
def lin_then(fn):  # projections under autocast produce bf16 inputs
    def f(x, wg, wu):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return fn(x @ wg, x @ wu)
    return f

for target in ("torch", "ttx"):
    for opt in ({"inner_compiler": "eager"}, {}):
        for dyn in (None, True):
            o = dict(opt, target=target)
            tag = f"{target} {'inductor' if not opt else 'eager'} dyn={dyn}"
            for dt, wdt in ((bf, bf), (f32, f32), (bf, f32)):
                t2 = f"{tag} {dt}/{wdt}".replace("torch.", "")
                x = torch.randn(3, 5, H).to(dt); r = torch.randn(3, 5, H).to(dt); w = (1 + .3 * torch.randn(H)).to(wdt); b = torch.randn(H).to(wdt)
                xt = torch.randn(3, H, 5).to(dt).transpose(1, 2)  # non-contiguous
                probe(f"llama {t2}", llama, (x, w), wrt=(0, 1), options=o, dynamic=dyn)
                probe(f"llama_T {t2}", llama, (xt, w), wrt=(0, 1), options=o, dynamic=dyn)
                probe(f"add_llama {t2}", add_llama, (x, r, w), wrt=(0, 1, 2), options=o, dynamic=dyn)
                probe(f"add_llama_T {t2}", add_llama, (xt, r, w), wrt=(0, 1, 2), options=o, dynamic=dyn)
                if dt == wdt:
                    probe(f"ln {t2}", ln, (x, w, b), wrt=(0, 1, 2), options=o, dynamic=dyn)
                    probe(f"ln_T {t2}", ln, (xt, w, b), wrt=(0, 1, 2), options=o, dynamic=dyn)
                    probe(f"add_ln {t2}", add_ln, (x, r, w, b), wrt=(0, 1, 2, 3), options=o, dynamic=dyn)
                    probe(f"swiglu {t2}", swiglu, (x, r), wrt=(0, 1), options=o, dynamic=dyn)
                    probe(f"swiglu_T {t2}", swiglu, (xt, r), wrt=(0, 1), options=o, dynamic=dyn)
                    gu = torch.randn(3, 5, 2 * H).to(dt)
                    probe(f"fused {t2}", fused, (gu,), wrt=(0,), options=o, dynamic=dyn)
                    probe(f"fused_T {t2}", fused, (torch.randn(3, 2 * H, 5).to(dt).transpose(1, 2),), wrt=(0,), options=o, dynamic=dyn)
                    probe(f"ac_llama {t2}", ac(llama), (x, w), wrt=(0, 1), options=o, dynamic=dyn)
                    probe(f"ac_add_ln {t2}", ac(add_ln), (x, r, w, b), wrt=(0, 1, 2, 3), options=o, dynamic=dyn)
                    probe(f"ac_swiglu {t2}", ac(swiglu), (x, r), wrt=(0, 1), options=o, dynamic=dyn)
