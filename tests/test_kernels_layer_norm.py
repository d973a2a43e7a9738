"""The Triton LayerNorm kernels (kernels/layer_norm.py) against an independent fp64 reference, forward and backward:
rows of one element, widths that are not powers of two, more rows than a program holds, bf16 / fp16 / fp32, with a
weight and a bias, a weight alone, neither. On CPU they run under TRITON_INTERPRET=1 (see conftest.py)."""
import pytest
import torch

from conftest import DEVICE, KERNEL_TARGET_OK, rel
from hopper import compile_for_hopper

pytestmark = pytest.mark.skipif(not KERNEL_TARGET_OK, reason="needs CUDA or TRITON_INTERPRET=1")

from mojo_compile.kernels.layer_norm import layer_norm_bwd, layer_norm_fwd  # noqa: E402  (after conftest)

# Normwise relative error allowed against fp64: twice the dtype's unit roundoff (the inputs are exact, the output
# and the gradient are rounded once after fp32 math), a few fp32 ulps for fp32 (sums over the row).
TOL = {torch.bfloat16: 2 * 2.0 ** -8, torch.float16: 2 * 2.0 ** -11, torch.float32: 1e-5}
SHAPES = [(1, 1), (5, 1), (7, 96), (33, 1000), (3, 5120), (2, 16384)]
DTYPES = [torch.bfloat16, torch.float16, torch.float32]
AFFINE = {"affine": (True, True), "weight": (True, False), "none": (False, False)}


def make(shape, dtype, weighted, biased):
    x = torch.randn(*shape, device=DEVICE) * 3 + 1.5  # an offset: the mean matters
    w = (1 + 0.5 * torch.randn(shape[-1], device=DEVICE)) if weighted else None
    b = torch.randn(shape[-1], device=DEVICE) if biased else None
    return [t.to(dtype) if t is not None else None for t in (x, w, b)]


def layer_norm_fp64(x, w, b, eps):
    x = x.double()
    mean = x.mean(-1, keepdim=True)
    y = (x - mean) / torch.sqrt((x - mean).pow(2).mean(-1, keepdim=True) + eps)
    y = y * w.double() if w is not None else y
    return y + b.double() if b is not None else y


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{m}x{n}" for m, n in SHAPES])
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("affine", list(AFFINE))
def test_forward(shape, dtype, affine):
    x, w, b = make(shape, dtype, *AFFINE[affine])
    y, mean, rstd = layer_norm_fwd(x, w, b, 1e-5)
    exact = layer_norm_fp64(x, w, b, 1e-5)
    assert y.dtype == dtype and y.shape == x.shape and mean.dtype == rstd.dtype == torch.float32
    if exact.norm() > 0:
        assert rel(y, exact) <= TOL[dtype], rel(y, exact)
    else:  # one column: every normalised value is 0
        assert torch.equal(y.float(), exact.float())
    x64 = x.double()
    torch.testing.assert_close(mean.double(), x64.mean(-1), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(rstd.double(), torch.rsqrt(x64.var(-1, unbiased=False) + 1e-5), rtol=1e-5, atol=0)


@pytest.mark.parametrize("shape", SHAPES[1:], ids=[f"{m}x{n}" for m, n in SHAPES[1:]])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("affine", list(AFFINE))
def test_backward(shape, dtype, affine):
    weighted, biased = AFFINE[affine]
    x, w, b = make(shape, dtype, weighted, biased)
    _, mean, rstd = layer_norm_fwd(x, w, b, 1e-5)
    gy = torch.randn(*shape, device=DEVICE).to(dtype)
    dx, dw, db = layer_norm_bwd(gy, x, w, mean, rstd, weighted, biased)
    leaves = [t.detach().double().requires_grad_() for t in (x, w, b) if t is not None]
    ref = layer_norm_fp64(leaves[0], leaves[1] if weighted else None, leaves[-1] if biased else None, 1e-5)
    exact = torch.autograd.grad(ref, leaves, gy.double())
    assert dx.dtype == dtype and dx.shape == x.shape
    if exact[0].norm() > 0:
        assert rel(dx, exact[0]) <= TOL[dtype], rel(dx, exact[0])
    if weighted:  # a sum over the rows, rounded once to the dtype
        assert dw.dtype == dtype and rel(dw, exact[1]) <= TOL[dtype], rel(dw, exact[1])
    else:
        assert dw.numel() == 0
    if biased:
        assert db.dtype == dtype and rel(db, exact[-1]) <= TOL[dtype], rel(db, exact[-1])
    else:
        assert db.numel() == 0


def test_no_rows():
    x = torch.randn(0, 8, device=DEVICE)
    y, mean, rstd = layer_norm_fwd(x, None, None, 1e-5)
    assert y.shape == (0, 8) and mean.shape == (0,)
    dx, dw, db = layer_norm_bwd(x, x, torch.ones(8, device=DEVICE), mean, rstd, True, True)
    assert dx.shape == (0, 8) and torch.equal(dw, torch.zeros(8, device=DEVICE)) and torch.equal(db, dw)


_COMPILE_BODY = r"""
from mojo_compile.kernels import layer_norm as L

for dtype in ("bf16", "fp32"):
    for block_m, block_n, warps in ((16, 128, 4), (1, 4096, 8), (1, 16384, 16)):
        for affine in (False, True):
            consts = dict(BLOCK_M=block_m, BLOCK_N=block_n, INTERPRET=False, HAS_W=affine, HAS_B=affine,
                          WEIGHT_GRAD=affine, BIAS_GRAD=affine)
            compile_kernel(L._fwd_kernel, consts, dict(X=dtype, W=dtype, B=dtype, Y=dtype, MEAN="fp32",
                                                       RSTD="fp32"), floats=("eps",), num_warps=warps)
            compile_kernel(L._bwd_kernel, consts, dict(DY=dtype, X=dtype, W=dtype, MEAN="fp32", RSTD="fp32",
                                                       DX=dtype, DW="fp32", DB="fp32"), num_warps=warps)
"""


def test_compiles_for_hopper():
    """Forward and backward compile for sm_90 (tests/hopper.py): bf16 and fp32, short rows several to a program,
    4K and 16K rows, with and without the affine parameters."""
    compile_for_hopper(_COMPILE_BODY, 24)
