"""Simulated fix: _ops_without_backward traces outside Dynamo's TracingContext (its fake mode / ShapeEnv)."""
import sys
from h import *
import mojo_compile.patterns as P
orig = P._ops_without_backward
def patched(pattern):
    with torch._guards.tracing(None):
        return orig(pattern)
P._ops_without_backward = patched
sys.argv = ["p10_min.py", sys.argv[1]]
exec(open("p10_min.py").read())
