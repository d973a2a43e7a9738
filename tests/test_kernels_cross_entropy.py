"""The Triton cross-entropy kernels (per-row loss and lse; dlogits) against fp64. On CPU they run under
TRITON_INTERPRET=1 (see conftest.py)."""
import pytest
import torch
from conftest import DEVICE, DTYPES, KERNEL_TARGET_OK, rel
from hopper import compile_for_hopper

from mojo_compile.kernels.cross_entropy import cross_entropy_bwd, cross_entropy_fwd

pytestmark = pytest.mark.skipif(not KERNEL_TARGET_OK, reason="needs CUDA or TRITON_INTERPRET=1")

# Normwise relative error allowed against fp64: lse and the per-row loss are fp32 results of fp32 arithmetic over
# exact inputs (a few ulps of the row's sum); dlogits is rounded once to the logits' dtype.
TOL_FP32 = 1e-6
TOL_GRAD = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 1e-6}
# (N, V, config): one row of one class; V not a multiple of the block; several blocks per row with a ragged tail
SHAPES = [(1, 1, None), (7, 1000, None), (5, 517, None), (6, 1000, (256, 4)), (3, 5000, (1024, 8)), (4, 517, (64, 2))]
IDS = [f"{n}x{v}" + (f"-block{c[0]}" if c else "") for n, v, c in SHAPES]


def make(n, v, dtype, ignore_index=-100, ignored=(1,)):
    x = (torch.randn(n, v, device=DEVICE) * 4).to(dtype)
    labels = torch.randint(0, v, (n,), device=DEVICE)
    for i in ignored:
        if i < n:
            labels[i] = ignore_index
    return x, labels


def reference(x, labels, ignore_index):
    """fp64: (row loss, lse, softmax)."""
    x64 = x.double()
    lse = torch.logsumexp(x64, -1)
    ignored = labels == ignore_index
    picked = x64.gather(1, labels.clamp(0, x.shape[1] - 1)[:, None])[:, 0]
    return torch.where(ignored, 0.0, lse - picked), lse, torch.softmax(x64, -1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,v,config", SHAPES, ids=IDS)
def test_forward(n, v, config, dtype):
    x, labels = make(n, v, DTYPES[dtype])
    before = x.clone()
    row_loss, lse = cross_entropy_fwd(x, labels, -100, config)
    assert torch.equal(x, before)  # inputs untouched
    ref_loss, ref_lse, _ = reference(x, labels, -100)
    assert row_loss.dtype == lse.dtype == torch.float32 and row_loss.shape == lse.shape == (n,)
    assert rel(lse, ref_lse) <= TOL_FP32, rel(lse, ref_lse)
    assert (row_loss.double() - ref_loss).abs().max().item() <= TOL_FP32 * (1 + ref_lse.abs().max().item())
    if n > 1:
        assert row_loss[1].item() == 0.0  # the ignored row


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,v,config", SHAPES, ids=IDS)
def test_backward(n, v, config, dtype):
    dtype = DTYPES[dtype]
    x, labels = make(n, v, dtype)
    _, lse = cross_entropy_fwd(x, labels, -100, config)
    a = torch.randn(n, device=DEVICE)
    b = a.clone()
    b[labels == -100] = 0.0
    a = torch.where(labels == -100, 0.0, a)
    dx = cross_entropy_bwd(x, labels, lse, a, b, config)
    assert dx.dtype == dtype and dx.shape == x.shape
    _, _, p = reference(x, labels, -100)
    onehot = torch.zeros_like(p)
    keep = labels != -100
    onehot[keep.nonzero()[:, 0], labels[keep]] = 1.0
    expected = p * a.double()[:, None] - onehot * b.double()[:, None]
    assert rel(dx, expected) <= TOL_GRAD[dtype], rel(dx, expected)
    if n > 1:
        assert torch.equal(dx[1], torch.zeros_like(dx[1]))  # the ignored row


def test_a_separate_lse_gradient():
    """a != b: the gradient of lse adds softmax * grad_lse, on ignored rows too."""
    x, labels = make(4, 300, torch.float32)
    _, lse = cross_entropy_fwd(x, labels, -100)
    b = torch.tensor([0.5, 0.0, -1.0, 2.0], device=DEVICE)
    a = b + torch.tensor([0.25, 1.0, 0.0, -3.0], device=DEVICE)
    dx = cross_entropy_bwd(x, labels, lse, a, b)
    _, _, p = reference(x, labels, -100)
    expected = p * a.double()[:, None]
    rows = torch.tensor([0, 2, 3], device=DEVICE)
    expected[rows, labels[rows]] -= b.double()[rows]
    assert rel(dx, expected) <= 1e-6


def test_ignore_index_within_the_classes():
    x, labels = make(6, 100, torch.bfloat16, ignore_index=3, ignored=(0, 4))
    labels[2] = 3
    row_loss, _ = cross_entropy_fwd(x, labels, 3)
    assert row_loss[[0, 2, 4]].tolist() == [0.0, 0.0, 0.0]
    assert (row_loss[[1, 3, 5]] > 0).all()


def test_strided_rows_read_in_place():
    """[N, V] columns of a wider tensor (row stride V + 5)."""
    wide = (torch.randn(5, 517 + 5, device=DEVICE) * 3).to(torch.bfloat16)
    x = wide[:, :517]
    labels = torch.randint(0, 517, (5,), device=DEVICE)
    row_loss, lse = cross_entropy_fwd(x, labels, -100)
    ref_loss, ref_lse, p = reference(x, labels, -100)
    assert rel(lse, ref_lse) <= TOL_FP32  # test_forward's bounds
    assert (row_loss.double() - ref_loss).abs().max().item() <= TOL_FP32 * (1 + ref_lse.abs().max().item())
    ones = torch.ones(5, device=DEVICE)
    dx = cross_entropy_bwd(x, labels, lse, ones, ones)
    expected = p.clone()
    expected[torch.arange(5), labels] -= 1.0
    assert rel(dx, expected) <= TOL_GRAD[torch.bfloat16]


def test_infinities_and_nan_rows():
    """-inf logits (a masked vocabulary) are exp 0; a row of -inf only has lse -inf and loss NaN (eager: NaN); a NaN
    makes its row NaN and no other; large logits do not overflow."""
    x = torch.randn(5, 700, device=DEVICE)
    x[0, 100:] = float("-inf")
    x[1] = float("-inf")
    x[2, 333] = float("nan")
    x[3] *= 1e4
    labels = torch.tensor([5, 7, 9, 11, 13], device=DEVICE)
    for config in (None, (128, 4)):
        row_loss, lse = cross_entropy_fwd(x, labels, -100, config)
        ref_loss, ref_lse, _ = reference(x, labels, -100)
        for i in (0, 3, 4):
            assert abs(lse[i].item() - ref_lse[i].item()) <= 1e-6 * max(1.0, abs(ref_lse[i].item())), i
            assert abs(row_loss[i].item() - ref_loss[i].item()) <= 1e-6 * max(1.0, abs(ref_lse[i].item())), i
        assert lse[1].item() == float("-inf") and row_loss[1].isnan()
        assert lse[2].isnan() and row_loss[2].isnan()


def test_labels_out_of_range_give_nan_without_reading_out_of_bounds():
    """torch raises for such a label; the kernels neither read out of bounds nor sync: the row's loss is NaN."""
    x = torch.randn(4, 50, device=DEVICE)
    labels = torch.tensor([50, -5, 3, -100], device=DEVICE)
    row_loss, lse = cross_entropy_fwd(x, labels, -100)
    assert row_loss[0].isnan() and row_loss[1].isnan() and row_loss[3].item() == 0.0
    assert torch.isfinite(lse).all() and torch.isfinite(row_loss[2])
    nan = float("nan")
    g = torch.tensor([nan, nan, 1.0, 0.0], device=DEVICE)  # what the lowering passes for such rows
    dx = cross_entropy_bwd(x, labels, lse, g, g)
    assert dx[:2].isnan().all() and torch.isfinite(dx[2:]).all() and torch.equal(dx[3], torch.zeros_like(dx[3]))


def test_empty():
    x = torch.randn(0, 10, device=DEVICE)
    labels = torch.zeros(0, dtype=torch.long, device=DEVICE)
    row_loss, lse = cross_entropy_fwd(x, labels, -100)
    assert row_loss.shape == lse.shape == (0,)
    assert cross_entropy_bwd(x, labels, lse, lse, lse).shape == (0, 10)


def test_bad_arguments():
    x = torch.randn(4, 10, device=DEVICE)
    with pytest.raises(ValueError):
        cross_entropy_fwd(x, torch.zeros(4, dtype=torch.int32, device=DEVICE), -100)
    with pytest.raises(ValueError):
        cross_entropy_fwd(x, torch.zeros(3, dtype=torch.long, device=DEVICE), -100)
    with pytest.raises(ValueError):
        cross_entropy_fwd(x[None], torch.zeros(4, dtype=torch.long, device=DEVICE), -100)


_COMPILE_BODY = r"""
from mojo_compile.kernels import cross_entropy as C

for dtype in ("bf16", "fp32"):
    for block, warps in ((4096, 8), (512, 4)):
        for smoothing in (False, True):  # label smoothing: the rows' sums, the uniform part of dlogits
            consts = dict(BLOCK_V=block, INTERPRET=False, PERSISTENT=False, SUM=smoothing, UNIFORM=smoothing)
            compile_kernel(C._fwd_kernel, consts, dict(X=dtype, LABELS="i64", LSE="fp32", LOSS="fp32",
                                                       ROW_SUM="fp32" if smoothing else dtype), num_warps=warps)
            compile_kernel(C._bwd_kernel, consts, dict(X=dtype, LABELS="i64", LSE="fp32", A="fp32", B="fp32",
                                                       C="fp32", DX=dtype), num_warps=warps)
"""


def test_compiles_for_hopper():
    """Forward and backward compile for sm_90 (tests/hopper.py) for bf16 and fp32 logits, at the GPU block size
    and a small one, with and without label smoothing (libdevice exp / log, int64 row offsets, the NaN-propagating
    max)."""
    compile_for_hopper(_COMPILE_BODY, 16)


def test_in_place_and_into_slices():
    """`out=`: the forward writes into slices of longer buffers and the backward overwrites the logits themselves
    (what the fused LM head does per chunk), bit for bit the results of fresh outputs, which match the fp64
    reference."""
    x, labels = make(6, 1000, torch.bfloat16)
    row_loss, lse = cross_entropy_fwd(x, labels, -100)
    ref_loss, ref_lse, _ = reference(x, labels, -100)
    assert rel(lse, ref_lse) <= TOL_FP32  # test_forward's bounds
    assert (row_loss.double() - ref_loss).abs().max().item() <= TOL_FP32 * (1 + ref_lse.abs().max().item())
    buffers = torch.full((2, 9), float("nan"), device=DEVICE)
    cross_entropy_fwd(x, labels, -100, out=(buffers[0, 2:8], buffers[1, 2:8]))
    assert torch.equal(buffers[0, 2:8], row_loss) and torch.equal(buffers[1, 2:8], lse)
    assert buffers[:, :2].isnan().all() and buffers[:, 8:].isnan().all()  # nothing outside the slices
    a, b = torch.rand(6, device=DEVICE), torch.rand(6, device=DEVICE)
    dx = cross_entropy_bwd(x, labels, lse, a, b)
    in_place = x.clone()
    assert cross_entropy_bwd(in_place, labels, lse, a, b, out=in_place) is in_place
    assert torch.equal(in_place, dx)
