"""Instrumented: with the package's shipped traces (empty cache dir), a compile of a tiny Llama reads registration
traces from the shipped file only, and Inductor re-traces the search function per candidate (patterns._Tracer.retrace);
the same number of re-traces and the same counts as a process that traces (MOJO_PATTERN_CACHE=0).
Usage: probe_retrace.py shipped|traced"""
import sys, os, json
import conftest  # noqa
import torch
import mojo_compile
from mojo_compile import patterns, pattern_cache
sys.path.insert(0, "tests")
from test_pattern_cache import tiny_llama, compiled_logits
if sys.argv[1] == "traced":
    os.environ["MOJO_PATTERN_CACHE"] = "0"
stats = {"retrace": 0, "registration_traced": 0, "shipped": 0}
real_retrace = patterns._Tracer.retrace
def retrace(self, args):
    stats["retrace"] += 1
    return real_retrace(self, args)
patterns._Tracer.retrace = retrace
real_reg = patterns._registration_trace
def reg(*a):
    stats["registration_traced"] += 1
    return real_reg(*a)
patterns._registration_trace = reg
real_shipped = pattern_cache._shipped_trace
def shipped(parts):
    gm = real_shipped(parts)
    stats["shipped"] += gm is not None
    return gm
pattern_cache._shipped_trace = shipped
for family in ("llama", "qwen3"):
    model, ids = tiny_llama(family), torch.randint(0, 128, (2, 11))
    with torch.no_grad():
        out, counts = compiled_logits(model, ids)
        ref = model.double()(ids).logits
    stats[family] = {"counts": counts, "maxerr": (out.double() - ref).abs().max().item()}
stats["cache_dir_files"] = sorted(os.listdir(os.environ["MOJO_CACHE_DIR"])) if os.path.isdir(os.environ["MOJO_CACHE_DIR"]) else []
print(json.dumps(stats, default=str))
