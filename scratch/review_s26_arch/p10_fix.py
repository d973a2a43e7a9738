"""Simulated fix for the user-pattern crash: registration trace outside the compile's tracing context."""
import sys
from h import *
import mojo_compile.patterns as P
from torch._subclasses.fake_tensor import unset_fake_temporarily
orig = P._registration_trace
def patched(fn, args):
    with torch._guards.tracing(None), unset_fake_temporarily():
        return orig(fn, args)
P._registration_trace = patched
sys.argv = ["p10_min.py", sys.argv[1]]
exec(open("p10_min.py").read())
