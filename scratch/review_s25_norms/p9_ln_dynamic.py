import sys; sys.path.insert(0, ".")
import torch, torch.nn.functional as F
import mojo_compile
from h import probe
H = 37
def ln_shape(x, w, b): return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)
def ln_const(x, w, b): return F.layer_norm(x, (H,), w, b, 1e-5)
m = torch.nn.LayerNorm(H)
def ln_mod(x, w, b): return m(x)
x = torch.randn(3, 5, H); w = torch.randn(H); b = torch.randn(H)
for fn in (ln_shape, ln_const, ln_mod):
    probe(fn.__name__, fn, (x, w, b), dynamic=True)
    rep = mojo_compile.last_report()
    print("   ", [str(n)[:300] for n in getattr(rep, "near_misses", [])][:3])
