"""The built-ins load at the first compile, under whatever mode the caller is in: with torch.inference_mode() the
example inputs are inference tensors. Does tracing them (MOJO_PATTERN_CACHE=0) give the shipped traces?"""
import os, json, sys
import conftest  # noqa
import torch
mode = sys.argv[1]
from mojo_compile import patterns, pattern_cache
ctx = torch.inference_mode() if mode == "inference" else torch.no_grad()
with ctx:
    patterns.load_fusions()
shipped = pattern_cache._shipped()
print("shipped read:", shipped is not None)
os.environ["MOJO_PATTERN_CACHE"] = "0"
recorded = {}
real = patterns._registration_trace
def reg(fn, args):
    gm = real(fn, args)
    recorded[len(recorded)] = (fn, args, gm)
    return gm
patterns._registration_trace = reg
fails = []
with ctx:
    for p in patterns.registered_patterns():
        if p.builtin:
            try:
                patterns._compile(p)
            except Exception as e:
                fails.append((p.name, f"{type(e).__name__}: {str(e)[:200]}"))
print("failures", len(fails), fails[:3])
