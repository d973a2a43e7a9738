"""Compiling the Triton kernels for Hopper (sm_90) through ptxas without a GPU. The interpreter cannot see GPU-only
compile errors (layouts, dot shapes, shared memory, pointer arithmetic in a branch it never takes), so each kernel
test file compiles its kernels here, in a fresh process with the interpreter off (its kernels are not compilable)."""
import os
import subprocess
import sys

import pytest

_HEADER = r'''
import sys
import triton
try:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
except ImportError:
    print("SKIP: no Triton compiler API"); sys.exit(0)


def compile_kernel(fn, consts, pointers, floats=(), divisible=(), num_warps=4, num_stages=3, **options):
    """pointers: argument -> element type ("bf16", "fp32", "u8", "i32"); floats: fp32 scalars; the rest i32.
    divisible: the arguments a launch would specialise as multiples of 16."""
    missing = [p.name for p in fn.params if p.is_constexpr and p.name not in consts]
    assert not missing, f"{fn.__name__}: give constexprs {missing} (else they compile as run-time values)"
    sig, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in consts:
            sig[name] = "constexpr"
            continue
        sig[name] = "*" + pointers[name] if name in pointers else "fp32" if name in floats else "i32"
        if name in divisible:
            attrs[(i,)] = [["tt.divisibility", 16]]
    consts = {k: v for k, v in consts.items() if k in fn.arg_names}
    src = ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    triton.compile(src, target=GPUTarget("cuda", 90, 32),
                   options=dict(num_warps=num_warps, num_stages=num_stages, **options))
    print("compiled", fn.__name__, flush=True)
'''


def compile_for_hopper(body: str, expected: int) -> None:
    """Runs `body` after the header above (which defines compile_kernel) and checks it compiled `expected` kernels;
    skips where this Triton has no compiler API."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"  # silences triton 3.9's notice; the default either way
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", _HEADER + body], env=env, cwd=root, capture_output=True, text=True,
                       timeout=600)
    if r.returncode == 0 and r.stdout.startswith("SKIP"):
        pytest.skip(r.stdout.strip())
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert r.stdout.count("compiled") == expected, r.stdout
