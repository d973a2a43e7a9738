import os, sys
from h import *
from mojo_compile import register_pattern
V = sys.argv[1]

def search(x, y):
    if V == "ri":
        return x[..., : x.shape[-1] // 2].repeat_interleave(2, dim=-1) * y
    if V == "slice":
        return x[..., : x.shape[-1] // 2] * y[..., : y.shape[-1] // 2]
    if V in ("noreg", "half"):
        return x[..., : x.shape[-1] // 2] * y[..., : y.shape[-1] // 2] if V == "noreg" else x[..., x.shape[-1] // 2:] * y[..., y.shape[-1] // 2:]
    if V == "const":
        return x[..., :8] * y[..., :8]
    if V == "ri_only":
        return x.repeat_interleave(2, dim=-1) * y

def replace(x, y):
    return search(x, y) + 0.0 * 0 if False else search(x, y).clone()

ex = [(torch.randn(2, 3, 8), torch.randn(2, 3, 8 if V != "slice" else 8))] if V != "ri_only" else [(torch.randn(2, 3, 4), torch.randn(2, 3, 8))]
V == "noreg" or register_pattern("sim.min." + V, search, replace, ex, lazy=os.environ.get("LAZY") == "1")
f = lambda x, y: search(x, y).sum(-1) * 3
x = torch.randn(2, 5, 16 if V != "ri_only" else 8, requires_grad=True); y = torch.randn(2, 5, 16)
if V in ("slice", "noreg", "const", "half"): y = torch.randn(2, 5, 16)
try:
    out = torch.compile(f, backend="mojo", options={"target": "torch", "inner_compiler": "eager"})(x, y)
    print(V, "ok", rel(out, f(x, y)), mojo_compile.last_report().counts())
except Exception as e:
    print(V, "CRASH", type(e).__name__, str(e)[:200])
