import conftest  # noqa
import sys
import torch
import mojo_compile
OPT = {"inner_compiler": "eager", "target": "torch"}
x = torch.randn(3, 8)
if sys.argv[1] == "lazy":
    mojo_compile.register_pattern("user.bad", lambda x: x.no_such(), lambda x: x, [(torch.randn(4, 8),)], lazy=True)
else:
    def chk(m):
        raise KeyError("oops")
    mojo_compile.register_pattern("user.chk", lambda x: torch.sigmoid(x) * 3.0, lambda x: torch.sigmoid(x) * 3.0, [(torch.randn(4, 8),)], extra_check=chk)
try:
    out = torch.compile(lambda x: torch.sigmoid(x) * 3.0, backend="mojo", options=OPT)(x)
    print(sys.argv[1], "ok", torch.equal(out, torch.sigmoid(x) * 3.0))
except Exception as e:
    print(sys.argv[1], "RAISED", type(e).__name__, str(e)[:300])
