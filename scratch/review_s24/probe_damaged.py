"""Shipped files that are damaged or foreign, read by a compile of a small norm+silu model in an empty cache dir.
Usage: probe_damaged.py KIND  (truncated | garbage | list | bad_entry | other_python)"""
import gzip, json, os, sys, tempfile
import conftest  # noqa
import torch
import torch.nn.functional as F
import mojo_compile
from mojo_compile import pattern_cache
kind = sys.argv[1]
real = os.path.join(pattern_cache.SHIPPED_DIR, pattern_cache.shipped_name())
raw = open(real, "rb").read()
d = tempfile.mkdtemp()
path = os.path.join(d, pattern_cache.shipped_name())
if kind == "truncated":
    open(path, "wb").write(raw[: len(raw) // 2])
elif kind == "garbage":
    open(path, "wb").write(b"\x1f\x8b" + os.urandom(200))
elif kind == "empty":
    open(path, "wb").write(b"")
elif kind == "list":
    open(path, "wb").write(gzip.compress(b"[]"))
elif kind == "bad_entry":
    data = json.loads(gzip.decompress(raw))
    for k, nodes in data["entries"].items():
        for n in nodes:
            if isinstance(n[2], dict) and n[2].get("op") == ["aten", "rsqrt", "default"]:
                n[2]["op"] = ["aten", "rsqrt_not_in_this_torch", "default"]
    open(path, "wb").write(gzip.compress(json.dumps(data).encode()))
elif kind == "other_python":
    other = f"torch-{torch.__version__.split('+')[0]}-py3.99.json.gz"
    open(os.path.join(d, other), "wb").write(raw)
pattern_cache.SHIPPED_DIR = d
w = torch.randn(64)
def f(x):
    h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    return F.silu(h) * h
x = torch.randn(2, 5, 64)
try:
    out = torch.compile(f, backend="mojo", options={"inner_compiler": "eager", "target": "torch"})(x)
    print("ok", torch.allclose(out, f(x), atol=1e-5), mojo_compile.last_report().graphs[0].counts())
except Exception as e:
    print("CRASH", type(e).__name__, str(e)[:300])
print("shipped read:", pattern_cache._shipped() is not None)
