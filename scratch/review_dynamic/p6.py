import faulthandler; faulthandler.enable()
from h import *
import sys, torch.nn.functional as F
T, sq, skv, causal = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
def f(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
cf = torch.compile(f, backend="mojo", options={"target": T, "inner_compiler": "eager"})
q = torch.randn(2, 2, sq, 8, requires_grad=True); k = torch.randn(2, 2, skv, 8, requires_grad=True); v = torch.randn(2, 2, skv, 8, requires_grad=True)
o = cf(q, k, v); print(mojo_compile.last_report().counts(), flush=True)
e = f(q, k, v); print("fwd eq", torch.allclose(o, e), flush=True)
o.sum().backward(); print("bw ok", flush=True)
