import conftest  # noqa
import sys, torch, torch.nn.functional as F, mojo_compile
from mojo_compile import patterns
n = {"t": 0}
orig = patterns.trace_pre_dispatch
def counting(*a, **k):
    n["t"] += 1
    return orig(*a, **k)
patterns.trace_pre_dispatch = counting
mode = sys.argv[1]
if mode == "warm":
    patterns.warm_cache()
else:
    ln = torch.nn.LayerNorm(64)
    f = lambda g, u: ln(F.gelu(g) * u) + F.rms_norm(u, (64,))
    g, u = torch.randn(2, 5, 64), torch.randn(2, 5, 64)
    torch.compile(f, backend="mojo", options={"inner_compiler": "eager", "target": "torch"})(g, u)
    print("SITES", [s.pattern for s in mojo_compile.last_report().sites])
print("TRACES", n["t"])
