"""The Triton LayerNorm kernels (kernels/layer_norm.py) against an independent fp64 reference, forward and backward:
rows of one element, widths that are not powers of two, more rows than a program holds, bf16 / fp16 / fp32, with a
weight and a bias, a weight alone, neither; and the residual-add form (add_layer_norm_fwd, layer_norm_bwd's
grad_residual). On CPU they run under TRITON_INTERPRET=1 (see conftest.py)."""
import pytest
import torch

from conftest import DEVICE, KERNEL_TARGET_OK, rel
from hopper import compile_for_hopper

pytestmark = pytest.mark.skipif(not KERNEL_TARGET_OK, reason="needs CUDA or TRITON_INTERPRET=1")

from mojo_compile.kernels.layer_norm import add_layer_norm_fwd, layer_norm_bwd, layer_norm_fwd  # noqa: E402

# Normwise relative error allowed against fp64: twice the dtype's unit roundoff (the inputs are exact, the output
# and the gradient are rounded once after fp32 math), a few fp32 ulps for fp32 (sums over the row).
TOL = {torch.bfloat16: 2 * 2.0 ** -8, torch.float16: 2 * 2.0 ** -11, torch.float32: 1e-5}
SHAPES = [(1, 1), (5, 1), (7, 96), (33, 1000), (3, 5120), (2, 16384)]
DTYPES = [torch.bfloat16, torch.float16, torch.float32]
AFFINE = {"affine": (True, True), "weight": (True, False), "none": (False, False)}
# A subset for the residual form: one column, short, long; and the widths whose tuned backward pipelines its loads
# (2560 and 5120: BLOCK_N 4096 and 8192), where fp32 with the residual's gradient has fewer stages to fit.
ADD_SHAPES = [(1, 1), (7, 96), (33, 1000), (5, 2560), (3, 5120), (2, 16384)]


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
    else:  # one column: y is the bias whatever x is
        assert torch.equal(dx, torch.zeros_like(dx))
    if weighted:  # a sum over the rows, rounded once to the dtype
        assert dw.dtype == dtype and rel(dw, exact[1]) <= TOL[dtype], rel(dw, exact[1])
    else:
        assert dw.numel() == 0
    if biased:
        assert db.dtype == dtype and rel(db, exact[-1]) <= TOL[dtype], rel(db, exact[-1])
    else:
        assert db.numel() == 0


@pytest.mark.parametrize("residual", [False, True], ids=["plain", "add"])
def test_forward_plans_by_row_count(residual, monkeypatch):
    """Planned for an H200: a decode's few rows get one row per program and 16 warps (latency), 16384 rows the
    swept table's config; a symbolic row count is never guarded on (it takes the table's)."""
    from mojo_compile.kernels import common, layer_norm
    from mojo_compile.lowering.devices import assume
    monkeypatch.setattr(layer_norm, "interpreting", lambda: False)
    plans = {}
    with assume("H200"):
        for rows in (1, 17, 16384):
            x = torch.empty(rows, 4096, dtype=torch.bfloat16, device="meta")
            w = torch.empty(4096, dtype=torch.bfloat16, device="meta")
            with common.record_launches() as launches:
                if residual:
                    add_layer_norm_fwd(x, torch.empty_like(x), w, w, 1e-5)
                else:
                    layer_norm_fwd(x, w, w, 1e-5)
            (_, grid, args), = launches
            plans[rows] = (grid, args["BLOCK_M"], args["num_warps"])
    table_m, table_warps, _, _ = layer_norm._FWD_TUNED[4096][residual]
    assert plans[1] == ((1,), 1, 16) and plans[17] == ((17,), 1, 16)
    assert plans[16384] == ((16384 // table_m,), table_m, table_warps)


# (BLOCK_M, num_warps, programs per SM, NUM_STAGES) of the forward: a program per block (programs per SM 0), or a
# persistent grid whose programs loop over several blocks, the last one partly past M.
FWD_CONFIGS = [(1, 8, 0, 1), (4, 4, 0, 1), (1, 8, 1, 3), (2, 16, 2, 2)]


@pytest.mark.parametrize("config", FWD_CONFIGS, ids=lambda c: "bm{}-w{}-sm{}-st{}".format(*c))
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "add"])
def test_forward_launch_configs(config, residual):
    """Every config the tuner may pick gives y (and the sum) as the fp64 reference does: 1003 rows of 2560."""
    x, w, b = make((1003, 2560), torch.bfloat16, True, True)
    r = residual_like(x) if residual else None
    if residual:
        y, total, mean, rstd = add_layer_norm_fwd(x, r, w, b, 1e-5, config)
        assert torch.equal(total, x + r)  # rounded once to bf16, as eager's add
        x = total
    else:
        y, mean, rstd = layer_norm_fwd(x, w, b, 1e-5, config)
    assert rel(y, layer_norm_fp64(x, w, b, 1e-5)) <= TOL[torch.bfloat16]
    torch.testing.assert_close(mean.double(), x.double().mean(-1), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(rstd.double(), torch.rsqrt(x.double().var(-1, unbiased=False) + 1e-5), rtol=1e-5, atol=0)


# (BLOCK_M, num_warps, programs per SM, NUM_STAGES): each program loops over many row blocks (so a pipelined
# prefetch has blocks to fetch ahead), the last one partly past M; 3 stages is the deepest the tuner tries.
BWD_CONFIGS = [(1, 4, 1, 1), (2, 8, 1, 2), (4, 8, 1, 3), (1, 16, 2, 3)]


@pytest.mark.parametrize("config", BWD_CONFIGS, ids=lambda c: "bm{}-w{}-sm{}-st{}".format(*c))
@pytest.mark.parametrize("dres", [False, True], ids=["plain", "dres"])
def test_backward_launch_configs(config, dres):
    """Every config the tuner may pick gives the same gradients as the fp64 reference: x, weight and bias, with
    the residual's gradient added or not. 1003 rows over at most 2 x the SM count programs: several blocks each."""
    x, w, b = make((1003, 2560), torch.bfloat16, True, True)
    _, mean, rstd = layer_norm_fwd(x, w, b, 1e-5)
    gy = torch.randn(1003, 2560, device=DEVICE).to(torch.bfloat16)
    gres = residual_like(x) if dres else None
    dx, dw, db = layer_norm_bwd(gy, x, w, mean, rstd, True, True, config, grad_residual=gres)
    leaves = [t.detach().double().requires_grad_() for t in (x, w, b)]
    exact = torch.autograd.grad(layer_norm_fp64(*leaves, 1e-5), leaves, gy.double())
    exact_dx = exact[0] + gres.double() if dres else exact[0]
    tol = TOL[torch.bfloat16]
    assert rel(dx, exact_dx) <= tol and rel(dw, exact[1]) <= tol and rel(db, exact[2]) <= tol, (
        rel(dx, exact_dx), rel(dw, exact[1]), rel(db, exact[2]))


def test_no_rows():
    x = torch.randn(0, 8, device=DEVICE)
    y, mean, rstd = layer_norm_fwd(x, None, None, 1e-5)
    assert y.shape == (0, 8) and mean.shape == (0,)
    dx, dw, db = layer_norm_bwd(x, x, torch.ones(8, device=DEVICE), mean, rstd, True, True)
    assert dx.shape == (0, 8) and torch.equal(dw, torch.zeros(8, device=DEVICE)) and torch.equal(db, dw)


def residual_like(x):
    """A fresh random residual of x's shape and dtype, with an offset of its own (the sum's mean is neither's)."""
    return (torch.randn(*x.shape, device=DEVICE) * 2 - 1).to(x.dtype)


@pytest.mark.parametrize("shape", ADD_SHAPES, ids=[f"{m}x{n}" for m, n in ADD_SHAPES])
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("affine", list(AFFINE))
def test_add_forward(shape, dtype, affine):
    x, w, b = make(shape, dtype, *AFFINE[affine])
    r = residual_like(x)
    args = [t for t in (x, r, w, b) if t is not None]
    before = [t.clone() for t in args]
    y, s, mean, rstd = add_layer_norm_fwd(x, r, w, b, 1e-5)
    assert all(map(torch.equal, args, before))  # the inputs, the residual included, are read, not written
    # The sum is eager's add: fp32 math rounded once to the dtype, bit for bit; the norm reads that rounded sum.
    assert s.dtype == dtype and torch.equal(s, x + r)
    exact = layer_norm_fp64(x + r, w, b, 1e-5)
    assert y.dtype == dtype and y.shape == x.shape and mean.dtype == rstd.dtype == torch.float32
    assert mean.shape == rstd.shape == x.shape[:-1]
    if exact.norm() > 0:
        assert rel(y, exact) <= TOL[dtype], rel(y, exact)
    else:  # one column: every normalised value is 0
        assert torch.equal(y.float(), exact.float())
    s64 = (x + r).double()  # the same tolerances as test_forward: fp32 sums over the row
    torch.testing.assert_close(mean.double(), s64.mean(-1), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(rstd.double(), torch.rsqrt(s64.var(-1, unbiased=False) + 1e-5), rtol=1e-5, atol=0)


@pytest.mark.parametrize("shape", ADD_SHAPES, ids=[f"{m}x{n}" for m, n in ADD_SHAPES])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("affine", list(AFFINE))
def test_add_backward(shape, dtype, affine):
    """grad_residual is added to grad_x before the one rounding; the parameters' gradients do not see it."""
    weighted, biased = AFFINE[affine]
    x, w, b = make(shape, dtype, weighted, biased)
    _, s, mean, rstd = add_layer_norm_fwd(x, residual_like(x), w, b, 1e-5)
    gy = torch.randn(*shape, device=DEVICE).to(dtype)
    gres = residual_like(x)
    before = [gy.clone(), gres.clone()]
    dx, dw, db = layer_norm_bwd(gy, s, w, mean, rstd, weighted, biased, grad_residual=gres)
    assert all(map(torch.equal, (gy, gres), before))  # the incoming gradients are read, not written
    leaves = [t.detach().double().requires_grad_() for t in (s, w, b) if t is not None]
    ref = layer_norm_fp64(leaves[0], leaves[1] if weighted else None, leaves[-1] if biased else None, 1e-5)
    exact = torch.autograd.grad(ref, leaves[0], gy.double())[0] + gres.double()
    # TOL as test_backward: fp32 math (the add included), one rounding; one column: exactly gres
    assert dx.dtype == dtype and dx.shape == x.shape
    assert rel(dx, exact) <= TOL[dtype], rel(dx, exact)
    if shape[-1] == 1:
        assert torch.equal(dx, gres)
    _, dw0, db0 = layer_norm_bwd(gy, s, w, mean, rstd, weighted, biased)
    assert torch.equal(dw, dw0) and torch.equal(db, db0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_add_backward_rounds_once(dtype):
    """grad_x + grad_residual is rounded once. With mean 1, rstd 1 and x all ones (xhat = 0), a row's grad_x is
    dy - mean(dy): exact in fp32, and 3/4 of (1 + eps) is not a value of the dtype; a grad_residual of minus its
    rounding leaves the rounding error, which a rounding before the add would lose. Every value is exact: no
    tolerance."""
    d = 1 + torch.finfo(dtype).eps
    x = torch.ones(2, 4, device=DEVICE, dtype=dtype)
    mean, rstd = torch.ones(2, device=DEVICE), torch.ones(2, device=DEVICE)
    gy = torch.tensor([[d, 0, 0, 0], [0, 0, -d, 0]], device=DEVICE).to(dtype)
    core = gy.double() - gy.double().mean(-1, keepdim=True)
    gres = (-core).to(dtype)
    exact = core + gres.double()
    assert exact.abs().max() > 0 and torch.equal(exact.to(dtype).double(), exact)  # nonzero, the dtype's values
    dx, _, _ = layer_norm_bwd(gy, x, None, mean, rstd, False, False, grad_residual=gres)
    assert torch.equal(dx.double(), exact)


def test_add_no_rows():
    """No rows: the forward's outputs are empty, grad_x is grad_residual (shape and dtype: there are no values)."""
    x = torch.randn(0, 8, device=DEVICE)
    y, s, mean, rstd = add_layer_norm_fwd(x, torch.randn(0, 8, device=DEVICE), None, None, 1e-5)
    assert y.shape == s.shape == (0, 8) and mean.shape == rstd.shape == (0,)
    gres = torch.randn(0, 8, device=DEVICE, dtype=torch.bfloat16)
    dx, dw, db = layer_norm_bwd(gres, x.bfloat16(), torch.ones(8, device=DEVICE).bfloat16(), mean, rstd, True, True,
                                grad_residual=gres)
    assert dx.dtype == gres.dtype and torch.equal(dx, gres)
    assert torch.equal(dw, torch.zeros(8, device=DEVICE).bfloat16()) and torch.equal(db, dw)


_COMPILE_BODY = r"""
from mojo_compile.kernels import layer_norm as L

for dtype in ("bf16", "fp32"):
    for block_m, block_n, warps in ((16, 128, 4), (1, 4096, 8), (1, 16384, 16)):
        # the residual add (and its gradient) with each dtype and block shape; its code does not touch the affine's
        for affine, res in ((False, False), (True, False), (True, True)):
            # bf16: the persistent forward and both kernels' loads pipelined; fp32: a program per block, no prefetch
            consts = dict(BLOCK_M=block_m, BLOCK_N=block_n, INTERPRET=False, PERSISTENT=dtype == "bf16", HAS_W=affine,
                          HAS_B=affine, WEIGHT_GRAD=affine, BIAS_GRAD=affine, HAS_RES=res, HAS_DRES=res,
                          NUM_STAGES=2 if dtype == "bf16" else 1)
            compile_kernel(L._fwd_kernel, consts, dict(X=dtype, R=dtype, W=dtype, B=dtype, Y=dtype, SUM=dtype,
                                                       MEAN="fp32", RSTD="fp32"), floats=("eps",), num_warps=warps)
            compile_kernel(L._bwd_kernel, consts, dict(DY=dtype, X=dtype, W=dtype, MEAN="fp32", RSTD="fp32",
                                                       DRES=dtype, DX=dtype, DW="fp32", DB="fp32"), num_warps=warps)
"""


def test_compiles_for_hopper():
    """Forward and backward compile for sm_90 (tests/hopper.py): bf16 and fp32, short rows several to a program,
    4K and 16K rows, with and without the affine parameters, with the residual add (and its gradient) and without;
    with the loads pipelined (bf16, the forward persistent) and not (fp32)."""
    compile_for_hopper(_COMPILE_BODY, 36)
