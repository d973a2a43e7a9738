import faulthandler; faulthandler.enable()
from h import *
import torch.nn.functional as F
def f(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
import sys
T = sys.argv[1]; mode = sys.argv[2]
cf = torch.compile(f, backend="mojo", dynamic={"auto": None, "dyn": True, "static": False}[mode], options={"target": T, "inner_compiler": "eager"})
for S in ([7, 9, 0] if mode == "auto" else [0]):
    q, k, v = (torch.randn(2, 2, S, 8, requires_grad=True) for _ in range(3))
    print("S", S, flush=True)
    o = cf(q, k, v)
    print(mojo_compile.last_report().counts(), flush=True)
    o.sum().backward()
    print("ok", o.shape, flush=True)
