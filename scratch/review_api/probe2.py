import conftest  # noqa
import sys, os
import torch, torch.nn.functional as F
sys.path.insert(0, "examples")
import relu_squared_fusion  # noqa
import mojo_compile
torch._dynamo.config.cache_size_limit = 64

def sites():
    return [s.pattern for s in mojo_compile.last_report().sites]

def check(name, fn, *args, opts=None, target="torch"):
    opts = {"inner_compiler": "eager", "target": target, **(opts or {})}
    torch._dynamo.reset()
    ea = [a.clone() for a in args]
    ca = [a.clone() for a in args]
    try:
        ref = fn(*ea)
    except Exception as e:
        ref = e
    try:
        out = torch.compile(fn, backend="mojo", options=opts)(*ca)
    except Exception as e:
        print(name, "COMPILED RAISED", type(e).__name__, str(e)[:300], "eager:", type(ref).__name__)
        return
    if isinstance(ref, Exception):
        print(name, "eager raised", ref, "compiled ok"); return
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    same = all(torch.equal(o, r) if o.dtype == r.dtype else False for o, r in zip(outs, refs))
    inputs_same = all(torch.equal(a, b) for a, b in zip(ea, ca))
    print(name, sites(), "outputs equal:", same, "inputs equal:", inputs_same,
          [ (o.dtype, r.dtype) for o, r in zip(outs, refs) if o.dtype != r.dtype])

x = torch.randn(4, 16, 32)
check("plain", lambda x: F.relu(x) ** 2, x)
check("plain ttx", lambda x: F.relu(x) ** 2, x, target="ttx")
check("inplace relu", lambda x: F.relu(x, inplace=True) ** 2, x)
check("relu_ then x", lambda x: (torch.relu_(x) ** 2, x), x)
check("int", lambda x: F.relu(x) ** 2, torch.randint(-5, 5, (4, 8)))
check("bool-ish uint8", lambda x: F.relu(x) ** 2, torch.randint(0, 200, (4, 8), dtype=torch.uint8))
check("fp64", lambda x: F.relu(x) ** 2, torch.randn(4, 8, dtype=torch.float64), target="ttx")
check("pow 2.0", lambda x: F.relu(x) ** 2.0, x)
check("pow 3", lambda x: F.relu(x) ** 3, x)
check("square_", lambda x: F.relu(x).square_(), x)
check("pow_ inplace", lambda x: F.relu(x).pow_(2), x)
check("relu view out", lambda x: (lambda r: (r ** 2, r))(F.relu(x)), x)
check("non contiguous ttx", lambda x: F.relu(x.transpose(1, 2)) ** 2, x, target="ttx")
check("mul r r ", lambda x: F.relu(x) * F.relu(x), x)
check("complex? abs", lambda x: F.relu(x) ** 2, torch.randn(4, 8, dtype=torch.bfloat16), target="ttx")
check("threshold", lambda x: F.threshold(x, 0.0, 0.0) ** 2, x)
check("relu6", lambda x: F.relu6(x) ** 2, x)
check("clamp_min", lambda x: torch.clamp_min(x, 0) ** 2, x)
check("pow out float64 scalar tensor", lambda x: F.relu(x) ** torch.tensor(2.0, dtype=torch.float64), x)
check("pow scalar tensor", lambda x: F.relu(x) ** torch.tensor(2), x)
check("float_power", lambda x: torch.float_power(F.relu(x), 2), x)
check("pow 2 dtype fp16 scalar", lambda x: torch.pow(F.relu(x), 2), torch.randn(3, 8, dtype=torch.float16), target="ttx")
