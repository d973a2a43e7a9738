"""The gated-GEMM Triton kernel (act(x @ Wg.T) * (x @ Wu.T) in one GEMM) against an fp64 reference and against the
unfused eager expression in the same dtype. On CPU it runs under TRITON_INTERPRET=1 (see conftest.py), where
`_config` picks 16x32x64 tiles with GROUP_M=2: the shapes below cover several row and column blocks, partial blocks
in M and N, the grouped-order tail (M=33: 3 row blocks in groups of 2), and both the even (K=64) and the masked (K=96)
K loop."""
import os
import sys

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE, DTYPES, KERNEL_TARGET_OK, rel
from hopper import compile_for_hopper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import gated_gemm as gg  # noqa: E402  (benchmarks/gated_gemm.py; after conftest, which sets TRITON_INTERPRET)

pytestmark = pytest.mark.skipif(not KERNEL_TARGET_OK, reason="needs CUDA or TRITON_INTERPRET=1")

ACTS = {"silu": F.silu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "gelu": F.gelu}
SHAPES = [(1, 64, 48), (7, 96, 80), (33, 96, 48)]  # (M, K, I)

# Normwise relative error allowed against fp64. bf16/fp16: the output carries four roundings to the dtype (g, u,
# act(g), the product), each within the unit roundoff u = eps/2, and act's condition number is ~1 where the output
# is large, so the error is ~2u at worst (measured: <= 1.25u); 3u leaves room. fp32: accumulation over K <= 96 in
# fp32 plus the same roundings (measured <= 3.5u); 1e-6 ~ 17u.
TOL = {torch.bfloat16: 3 * 2.0 ** -8, torch.float16: 3 * 2.0 ** -11, torch.float32: 1e-6}


def make(m, k, i, dtype, bias=False, lead=()):
    x = torch.randn(*lead, m, k, device=DEVICE).to(dtype)
    wg, wu = ((torch.randn(i, k, device=DEVICE) / k ** 0.5).to(dtype) for _ in range(2))  # g, u ~ N(0, 1)
    bg, bu = ((0.5 * torch.randn(i, device=DEVICE)).to(dtype) for _ in range(2)) if bias else (None, None)
    return x, wg, wu, bg, bu


def fp64(x, wg, wu, bg, bu, act):
    g = F.linear(x.double(), wg.double(), bg.double() if bg is not None else None)
    u = F.linear(x.double(), wu.double(), bu.double() if bu is not None else None)
    return ACTS[act](g) * u


def check(out, x, wg, wu, bg, bu, act):
    dtype = x.dtype
    eps = torch.finfo(dtype).eps
    assert out.dtype == dtype and out.shape == (*x.shape[:-1], wg.shape[0]) and out.is_contiguous()
    assert rel(out, fp64(x, wg, wu, bg, bu, act)) <= TOL[dtype]
    g, u = F.linear(x, wg, bg), F.linear(x, wu, bu)
    eager = ACTS[act](g) * u
    # Against eager in the same dtype: the same roundings, but the GEMM sums in another order, so where g or u lies
    # near a rounding boundary it comes out one ulp (<= eps |g|) apart. That moves act(g) * u by <= |act'| eps |g| |u|
    # with |act'| <= 1.13 for all three activations, before the final roundings (<= 1 ulp of the output). Measured:
    # <= 0.7 eps (|eager| + |g u|) per element, < 2% of elements differ at all, normwise <= 0.05 eps. In fp32 the
    # accumulation order itself shows (normwise <= 1.7 eps measured).
    if dtype == torch.float32:
        assert rel(out, eager) <= 4 * eps
    else:
        assert rel(out, eager) <= 0.25 * eps
        bound = 2 * eps * (eager.double().abs() + (g.double() * u.double()).abs())
        assert ((out.double() - eager.double()).abs() <= bound).all()


CASES = [(s, d, a) for s in SHAPES for d in DTYPES for a in ACTS]


@pytest.mark.parametrize("shape,dtype,act", CASES, ids=[f"{m}x{k}x{i}-{d}-{a}" for (m, k, i), d, a in CASES])
def test_separate_weights(shape, dtype, act):
    x, wg, wu, _, _ = make(*shape, DTYPES[dtype])
    check(gg.gated_gemm(x, wg, wu, act), x, wg, wu, None, None, act)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("form", ["separate", "gate_first", "up_first"])
def test_weight_forms_and_bias(form, bias, dtype):
    act = {"separate": "gelu", "gate_first": "silu", "up_first": "gelu_tanh"}[form]
    x, wg, wu, bg, bu = make(33, 96, 80, DTYPES[dtype], bias)
    if form == "separate":
        out = gg.gated_gemm(x, wg, wu, act, bg, bu)
    else:
        first, second = (wg, wu) if form == "gate_first" else (wu, wg)
        w = torch.cat([first, second])  # Phi3's gate_up_proj weight, [2I, K]
        b = None if not bias else torch.cat([bg, bu] if form == "gate_first" else [bu, bg])
        out = gg.gated_gemm_fused(x, w, act, gate_first=form == "gate_first", bias=b)
    check(out, x, wg, wu, bg, bu, act)


def test_fused_equals_separate():
    """The fused form is the separate kernel on two row slices of the weight: bit for bit the same."""
    x, wg, wu, bg, bu = make(7, 64, 48, torch.bfloat16, bias=True)
    out = gg.gated_gemm(x, wg, wu, "silu", bg, bu)
    assert torch.equal(gg.gated_gemm_fused(x, torch.cat([wg, wu]), "silu", True, torch.cat([bg, bu])), out)
    assert torch.equal(gg.gated_gemm_fused(x, torch.cat([wu, wg]), "silu", False, torch.cat([bu, bg])), out)


def test_leading_dims_and_strided_input():
    """x [..., K] keeps its leading dims; a non-contiguous x is read correctly and left untouched."""
    base = torch.randn(2, 5, 2, 64, device=DEVICE).to(torch.bfloat16)
    x = base[:, :, 1, :]  # rows with stride 128
    before = base.clone()
    _, wg, wu, _, _ = make(1, 64, 48, torch.bfloat16)
    out = gg.gated_gemm(x, wg, wu, "silu")
    assert out.shape == (2, 5, 48)
    check(out, x, wg, wu, None, None, "silu")
    assert torch.equal(base, before)


@pytest.mark.parametrize("config", [(16, 16, 32, 1, 4, 1), (32, 64, 128, 4, 4, 2)], ids=["small", "wide_k"])
def test_config_override(config):
    """Other tiles: more column blocks and K steps without grouping; one masked K step wider than K."""
    x, wg, wu, _, _ = make(33, 96, 80, torch.bfloat16)
    check(gg.gated_gemm(x, wg, wu, "silu", config=config), x, wg, wu, None, None, "silu")


def test_no_rows():
    x, wg, wu, _, _ = make(0, 64, 48, torch.bfloat16, lead=(3,))
    assert gg.gated_gemm(x, wg, wu, "silu").shape == (3, 0, 48)


def test_bad_arguments():
    x, wg, wu, bg, _ = make(4, 64, 48, torch.bfloat16, bias=True)
    with pytest.raises(ValueError, match="act"):
        gg.gated_gemm(x, wg, wu, "relu")
    with pytest.raises(ValueError, match="dtype"):
        gg.gated_gemm(x, wg.float(), wu, "silu")
    with pytest.raises(ValueError, match="both biases"):
        gg.gated_gemm(x, wg, wu, "silu", bias_gate=bg)
    with pytest.raises(ValueError, match=r"\[I, K\]"):
        gg.gated_gemm(x, wg, wu[:, :32], "silu")


@pytest.mark.parametrize("m", [1, 16, 64, 128, 1024, 16384])
def test_gpu_heuristic_fits_hopper(monkeypatch, m):
    """The GPU configs (not run here): power-of-2 tiles, an M tile of at least 16 (the smallest MMA), and pipeline
    stages that fit the 227 KB of shared memory of an H100/H200 (x tile + two weight tiles per stage)."""
    monkeypatch.setattr(gg, "interpreting", lambda: False)
    for elem_bytes in (2, 4):
        bm, bn, bk, group, warps, stages = gg._config(m, 12288, 4096, elem_bytes)
        assert all(v & (v - 1) == 0 for v in (bm, bn, bk, group, warps)) and bm >= 16
        assert stages * (bm * bk + 2 * bk * bn) * elem_bytes <= 227 * 1024


_COMPILE_BODY = r"""
sys.path.insert(0, "benchmarks")
import gated_gemm as GG

pointers = {n: "bf16" for n in ("X", "WG", "WU", "BG", "BU", "OUT")}
for m, act, even_k in ((16, "silu", True), (128, "gelu_tanh", False), (4096, "silu", True), (4096, "gelu", False)):
    block_m, block_n, block_k, group_m, num_warps, num_stages = GG._config(m, 12288, 4096)
    consts = dict(ACT=GG.ACT_CODES[act], HAS_BIAS=True, EVEN_K=even_k, BLOCK_M=block_m, BLOCK_N=block_n,
                  BLOCK_K=block_k, GROUP_M=group_m, INTERPRET=False)
    compile_kernel(GG._gated_gemm_kernel, consts, pointers, divisible=("X", "WG", "WU", "OUT", "K"),
                   num_warps=num_warps, num_stages=num_stages)
"""


def test_compiles_for_hopper():
    """The epilogue GEMM compiles for sm_90 (tests/hopper.py) in its decode, mid-size and wgmma prefill tiles."""
    compile_for_hopper(_COMPILE_BODY, 4)
