"""For every built-in pattern input set: does its registration trace (as _registration_trace makes it, i.e. what a
process that traces gets) depend on ambient state that the cache key leaves out? Prints the sets whose trace differs
from the plain one under each ambient state."""
import contextlib
import conftest  # noqa
import torch
from mojo_compile import patterns
from torch._inductor import pattern_matcher as pm

patterns.load_fusions()

def traces():
    out = {}
    for p in patterns.registered_patterns():
        if not p.builtin:
            continue
        for i, inputs in enumerate(p.example_inputs):
            args = pm._trace_args_for_initial_trace(list(__import__('inspect').signature(p.search).parameters),
                                                     list(inputs), p.scalars)
            try:
                with patterns._default_float32():
                    gm = patterns._registration_trace(p.search, args)
                out[p.name, i] = str(gm.graph)
            except Exception as e:
                out[p.name, i] = f"FAIL {type(e).__name__}: {e}"[:200]
    return out

base = traces()
print("sets", len(base))
@contextlib.contextmanager
def sdp_math_only():
    f, m, e = (torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.mem_efficient_sdp_enabled(),
               torch.backends.cuda.math_sdp_enabled())
    torch.backends.cuda.enable_flash_sdp(False); torch.backends.cuda.enable_mem_efficient_sdp(False)
    try:
        yield
    finally:
        torch.backends.cuda.enable_flash_sdp(f); torch.backends.cuda.enable_mem_efficient_sdp(e)

@contextlib.contextmanager
def deterministic():
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(False)

@contextlib.contextmanager
def mkldnn_off():
    with torch.backends.mkldnn.flags(enabled=False):
        yield

@contextlib.contextmanager
def no_grad():
    with torch.no_grad():
        yield

@contextlib.contextmanager
def bf16_default():
    saved = torch.get_default_dtype(); torch.set_default_dtype(torch.bfloat16)
    try:
        yield
    finally:
        torch.set_default_dtype(saved)

@contextlib.contextmanager
def autocast_cpu():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        yield

for name, ctx in [("inference_mode", torch.inference_mode), ("sdp_math_only", sdp_math_only),
                  ("deterministic", deterministic), ("mkldnn_off", mkldnn_off), ("no_grad", no_grad),
                  ("bf16_default", bf16_default), ("autocast_cpu", autocast_cpu)]:
    with ctx():
        other = traces()
    diff = [k for k in base if base[k] != other[k]]
    print(name, len(diff), diff[:6])
    if diff:
        k = diff[0]
        print("  plain:", base[k][:600]); print("  under:", other[k][:600])
