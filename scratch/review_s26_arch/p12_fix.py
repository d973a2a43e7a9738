"""Simulated fix: the torch attention backward takes delta = rowsum(p * dp) in fp32 instead of rowsum(do * out_bf16)."""
import sys
from h import *
import mojo_compile.ops.attention as A
src_old = "    delta = (do * out.float()).sum(-1, keepdim=True)"
import inspect, textwrap
src = inspect.getsource(A.reference_backward)
if sys.argv[1] == "fix":
    assert src_old in src
    src = src.replace(src_old, "    delta = (p * dp).sum(-1, keepdim=True)")
ns = {}
exec(compile(src, A.__file__, "exec"), A.__dict__, ns)
A.reference_backward.__code__ = ns["reference_backward"].__code__
sys.argv = ["p9.py"] + sys.argv[2:]
exec(open("p9.py").read())
