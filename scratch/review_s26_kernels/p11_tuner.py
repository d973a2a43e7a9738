import os, sys, tempfile
from kh import *
mode = sys.argv[1]
d = tempfile.mkdtemp()
if mode == "unwritable":
    blocker = os.path.join(d, "file")
    open(blocker, "w").close()
    os.environ["MOJO_TUNE_CACHE"] = os.path.join(blocker, "tune.json")  # a directory that cannot be made
elif mode == "list":
    p = os.path.join(d, "tune.json"); open(p, "w").write("[]")
    os.environ["MOJO_TUNE_CACHE"] = p
elif mode == "entry":
    from mojo_compile import tuner
    p = os.path.join(d, "tune.json")
    os.environ["MOJO_TUNE_CACHE"] = p
os.environ["MOJO_TUNE"] = "1"
q, k, v = torch.randn(1, 2, 3, 16), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16)
if mode == "entry":  # a cache written by an older version: an entry that is not {"choice": ...}
    import json
    from mojo_compile import tuner
    key = f"{tuner._environment('cpu')}|attention|{tuner.bucket(*q.shape, 2, 8, q.dtype, False, True, False, False, False, False)}"
    json.dump({key: "flash"}, open(p, "w"))
try:
    o, _ = mojo.attention(q, k, v, None, None, 0.25, True, 0, 0.0, None, "ttx")
    print(mode, "OK", rel(o, mojo.attention(q, k, v, None, None, 0.25, True, 0, 0.0, None, "torch")[0]))
except Exception as e:
    print(mode, "CRASH", type(e).__name__, str(e)[:200])
