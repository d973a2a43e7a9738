"""fp32 weights cast to the activation dtype (or fp16) inside norms whose patterns write weight.to(torch.float32)."""
import conftest  # noqa
import torch
import mojo_compile
torch.manual_seed(0)
H = 64

def rstd(x32):
    return torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)
def gemma3n_like(x, w):  # weight on the right, cast to x's dtype
    x32 = x.float(); return ((x32 * rstd(x32)) * w.to(x.dtype)).to(x.dtype)
def helium_like(x, w):
    x32 = x.float(); return (w.to(x.dtype) * (x32 * rstd(x32))).to(x.dtype)
def gemma_like(x, w):
    x32 = x.float(); return ((x32 * rstd(x32)) * (1.0 + w.to(x.dtype))).to(x.dtype)
def cohere_like(x, w):
    h = x.to(torch.float32); mean = h.mean(-1, keepdim=True); var = (h - mean).pow(2).mean(-1, keepdim=True)
    h = (h - mean) * torch.rsqrt(var + 1e-5); h = w.to(x.dtype) * h; return h.to(x.dtype)
def add_gemma3n_like(x, r, w):
    h = x + r; return gemma3n_like(h, w), h

for fn in (gemma3n_like, helium_like, gemma_like, cohere_like, add_gemma3n_like):
    for xdt in (torch.bfloat16, torch.float16):
        torch._dynamo.reset(); mojo_compile.reset_report()
        x = torch.randn(4, H, dtype=xdt); w = 1 + 0.3 * torch.randn(H)
        args = (x, torch.randn(4, H, dtype=xdt), w) if fn is add_gemma3n_like else (x, w)
        got = torch.compile(fn, backend="mojo", options={"inner_compiler": "eager", "target": "torch"})(*args)
        want = fn(*args)
        got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
        d = max((g.double() - e.double()).abs().max().item() for g, e in zip(got, want))
        print(f"{fn.__name__:18s} {str(xdt):15s} sites={[s.pattern for s in mojo_compile.last_report().sites]} "
              f"max|compiled-eager|={d:.3g} bitwise={all(torch.equal(g, e) for g, e in zip(got, want))}")
