from h import *
import traceback, sys
from c2 import sdpa_hf, mk_qkv_am, sdpa_arange, sdpa_causal, mk_qkv
T = sys.argv[1]; which = sys.argv[2]
fn, mk = {"hf": (sdpa_hf, mk_qkv_am), "arange": (sdpa_arange, mk_qkv), "causal": (sdpa_causal, mk_qkv)}[which]
shape = tuple(int(x) for x in sys.argv[3].split(","))
cf = torch.compile(fn, backend="mojo", dynamic=False, options={"target": T, "inner_compiler": "eager"})
ins = mk(shape)
ins = [t.requires_grad_() if t.is_floating_point() else t for t in ins]
try:
    o = cf(*ins); print(mojo_compile.last_report().sites)
    o.sum().backward(); print("ok")
except Exception:
    traceback.print_exc()
