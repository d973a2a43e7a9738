"""The Triton RMSNorm kernels against an independent fp64 reference (forward and backward), and against the torch
target, whose roundings they must reproduce. On CPU they run under TRITON_INTERPRET=1 (see conftest.py)."""
import itertools

import pytest
import torch

from conftest import DEVICE, KERNEL_TARGET_OK, rel
from hopper import compile_for_hopper

pytestmark = pytest.mark.skipif(not KERNEL_TARGET_OK, reason="needs CUDA or TRITON_INTERPRET=1")

mojo = torch.ops.mojo

# Normwise relative error allowed against fp64: twice the dtype's unit roundoff (an output cast and one
# intermediate rounding), and a few fp32 ulps for fp32.
TOL = {torch.bfloat16: 2 * 2.0 ** -8, torch.float16: 2 * 2.0 ** -11, torch.float32: 1e-6}

SHAPES = [(1, 96), (7, 96), (33, 1000), (4, 5120), (3, 20000)]  # 20000 > MAX_FUSED_N: the looping kernels


def rms_norm_fp64(x, weight, eps, offset, residual=None):
    """The definition, in fp64 with no intermediate rounding."""
    x = x.double() if residual is None else (x + residual).double()  # the sum is rounded, as the op defines it
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * (weight.double() + offset) if weight is not None else y


def make(shape, dtype, weighted, residual, w_dtype=None):
    x = torch.randn(*shape, device=DEVICE, dtype=dtype) * 3 + 0.5
    w = (1 + 0.5 * torch.randn(shape[-1], device=DEVICE)).to(w_dtype or dtype) if weighted else None
    r = torch.randn(*shape, device=DEVICE, dtype=dtype) if residual else None
    return x, w, r


CASES = list(itertools.product(SHAPES, [torch.bfloat16, torch.float16, torch.float32], ["normed", "output", "rstd"]))


@pytest.mark.parametrize("shape,dtype,cast", CASES, ids=[f"{s[0]}x{s[1]}-{str(d)[6:]}-{c}" for s, d, c in CASES])
@pytest.mark.parametrize("residual", [False, True], ids=["norm", "add_norm"])
def test_forward(shape, dtype, cast, residual):
    weighted = cast != "rstd"
    offset = 1.0 if cast == "output" else 0.0  # Gemma's 1 + w rides on the fp32 mode
    x, w, r = make(shape, dtype, weighted, residual)
    eps = 1e-6
    if residual:
        y, total, rstd = mojo.add_rms_norm(x, r, w, eps, offset, cast, "ttx")
        y_ref, total_ref, _ = mojo.add_rms_norm(x, r, w, eps, offset, cast, "torch")
        assert torch.equal(total, x + r)  # the sum is the eager bf16 add, bit for bit
    else:
        y, rstd = mojo.rms_norm(x, w, eps, offset, cast, "ttx")
        y_ref, _ = mojo.rms_norm(x, w, eps, offset, cast, "torch")
    exact = rms_norm_fp64(x, w, eps, offset, r)
    assert y.dtype == y_ref.dtype and y.shape == x.shape and y.is_contiguous()
    assert rel(y, exact) <= TOL[dtype], rel(y, exact)
    if dtype != torch.float32:
        # The same roundings as the torch target: only rsqrt's last bit may differ, which moves the normalised value
        # by one ulp and, through the second rounding of "normed" mode (times a weight of up to ~2), the output by two.
        torch.testing.assert_close(y, y_ref, rtol=2 * torch.finfo(dtype).eps, atol=torch.finfo(dtype).tiny)
    src = (x + r if residual else x).double()
    torch.testing.assert_close(rstd.double(), torch.rsqrt(src.pow(2).mean(-1) + eps), rtol=1e-5, atol=0)


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{s[0]}x{s[1]}" for s in SHAPES])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("variant", ["normed", "output_offset", "unweighted", "add_norm"])
def test_backward(shape, dtype, variant):
    cast = "output" if variant == "output_offset" else "normed"
    offset = 1.0 if variant == "output_offset" else 0.0
    x, w, r = make(shape, dtype, variant != "unweighted", variant == "add_norm")
    leaves = [t.detach().requires_grad_() for t in (x, w, r) if t is not None]
    if variant == "add_norm":
        y, total, _ = mojo.add_rms_norm(leaves[0], leaves[2], leaves[1], 1e-6, offset, cast, "ttx")
        gy, gs = torch.randn_like(y), torch.randn_like(total)
        grads = torch.autograd.grad((y, total), leaves, (gy, gs))
    else:
        y, _ = mojo.rms_norm(leaves[0], leaves[1] if w is not None else None, 1e-6, offset, cast, "ttx")
        gy = torch.randn_like(y)
        grads = torch.autograd.grad(y, leaves, gy)
    leaves64 = [t.detach().double().requires_grad_() for t in (x, w, r) if t is not None]
    x64 = leaves64[0] if r is None else leaves64[0] + leaves64[2]
    w64 = leaves64[1] if w is not None else None
    y64 = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6)
    y64 = y64 * (w64 + offset) if w64 is not None else y64
    outs64, douts = (y64,), (gy.double(),)
    if variant == "add_norm":
        outs64, douts = (y64, x64), (gy.double(), gs.double())
    grads64 = torch.autograd.grad(outs64, leaves64, douts)
    for g, g64, name in zip(grads, grads64, ["x", "weight", "residual"] if w is not None else ["x", "residual"]):
        assert g.dtype == dtype
        assert rel(g, g64) <= 2 * TOL[dtype], (name, rel(g, g64))


def test_backward_is_deterministic():
    x, w, _ = make((257, 1000), torch.float32, True, False)
    x.requires_grad_(), w.requires_grad_()
    runs = []
    for _ in range(2):
        y, _ = mojo.rms_norm(x, w, 1e-6, 0.0, "normed", "ttx")
        runs.append(torch.autograd.grad(y, (x, w), torch.ones_like(y)))
    assert all(torch.equal(a, b) for a, b in zip(*runs))


def test_mixed_precision_weight_and_strided_input():
    """fp32 weight with bf16 input promotes the Llama spelling's output; a non-contiguous input is read correctly
    and left untouched."""
    base = torch.randn(16, 2, 96, device=DEVICE, dtype=torch.bfloat16)
    x = base[:, 1, :]  # strided rows
    before = base.clone()
    w = torch.randn(96, device=DEVICE, dtype=torch.float32)
    y, _ = mojo.rms_norm(x, w, 1e-5, 0.0, "normed", "ttx")
    y_ref, _ = mojo.rms_norm(x, w, 1e-5, 0.0, "normed", "torch")
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, y_ref, rtol=1e-6, atol=1e-6)
    assert torch.equal(base, before)


def test_empty_rows():
    x = torch.randn(0, 64, device=DEVICE, dtype=torch.bfloat16)
    y, rstd = mojo.rms_norm(x, None, 1e-6, 0.0, "output", "ttx")
    assert y.shape == (0, 64) and rstd.shape == (0,)


_COMPILE_BODY = r"""
from mojo_compile.kernels import rms_norm as K


def compile_norm(fn, consts):
    pointers = {n: "fp32" if n in ("RSTD", "DW") else "bf16" for n in fn.arg_names
                if n.isupper() and n not in ("M", "N")}
    compile_kernel(fn, dict(consts, INTERPRET=False, PERSISTENT=False), pointers, ("eps", "weight_offset"), num_warps=8)


for cast in (0, 1, 2):  # "normed", "output", "rstd"
    norm = dict(HAS_W=True, CAST=cast, BLOCK_N=4096)
    compile_norm(K._fwd_rows_kernel, dict(norm, HAS_RES=True, BLOCK_M=4, EVICT=True))
    compile_norm(K._fwd_loop_kernel, dict(norm, HAS_RES=True))
    compile_norm(K._bwd_rows_kernel, dict(norm, HAS_DRES=True, WEIGHT_GRAD=True, BLOCK_M=2))
    compile_norm(K._bwd_loop_kernel, dict(norm, HAS_DRES=True, WEIGHT_GRAD=True))
"""


def test_compiles_for_hopper():
    """The four RMSNorm kernels compile for sm_90 (tests/hopper.py) with a residual and a weight, in every cast."""
    compile_for_hopper(_COMPILE_BODY, 12)
