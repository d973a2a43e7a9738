"""Confirmed findings of review s25 (norms and gated MLP). Each test asserts eager's behaviour and fails on the
current code. Run from /work/main with PYTHONPATH=tests:. (conftest is imported before mojo_compile)."""
import conftest  # sets TRITON_INTERPRET / MOJO_CACHE_DIR before mojo_compile loads
import pytest
import torch
import torch._dynamo

import mojo_compile

del conftest  # imported for its side effects only
H = 64
EAGER_INNER = {"inner_compiler": "eager", "target": "torch"}


@pytest.fixture(autouse=True)
def _fresh_state():
    torch._dynamo.reset()
    mojo_compile.reset_report()
    yield
    torch._dynamo.reset()
    mojo_compile.reset_report()


def compiled(fn, options=EAGER_INNER, dynamic=None):
    return torch.compile(fn, backend="mojo", options=options, dynamic=dynamic)


def _rstd(x32):
    return torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)


# ------------------------------------------------------------------------------------------------------------------
# Finding 1: a weight cast to another dtype than fp32 (`w.to(x.dtype)`, `w.half()`) is taken for the patterns'
# `weight.to(torch.float32)`; the fused op then multiplies by the *unrounded* fp32 weight.
def gemma3n_weight_in_x_dtype(x, w):
    x32 = x.float()
    return ((x32 * _rstd(x32)) * w.to(x.dtype)).to(x.dtype)


def helium_weight_in_x_dtype(x, w):
    x32 = x.float()
    return (w.to(x.dtype) * (x32 * _rstd(x32))).to(x.dtype)


def gemma_offset_weight_in_x_dtype(x, w):
    x32 = x.float()
    return ((x32 * _rstd(x32)) * (1.0 + w.to(x.dtype))).to(x.dtype)


def gemma_offset_weight_in_fp16(x, w):
    x32 = x.float()
    return ((x32 * _rstd(x32)) * (1.0 + w.half())).to(x.dtype)


def add_then_gemma3n_weight_in_x_dtype(x, r, w):
    h = x + r
    return gemma3n_weight_in_x_dtype(h, w), h


@pytest.mark.parametrize("fn", [gemma3n_weight_in_x_dtype, helium_weight_in_x_dtype, gemma_offset_weight_in_x_dtype,
                                gemma_offset_weight_in_fp16, add_then_gemma3n_weight_in_x_dtype],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("options", [EAGER_INNER, {"target": "torch"}], ids=["eager_inner", "inductor_inner"])
def test_rms_norm_with_fp32_weight_cast_to_a_narrower_dtype_keeps_the_rounded_weight(fn, x_dtype, options):
    x = torch.randn(8, H, dtype=x_dtype)
    w = 1 + 0.3 * torch.randn(H)  # fp32 master weight; the model rounds it to x's dtype (or fp16) itself
    args = (x, torch.randn(8, H, dtype=x_dtype), w) if "add_then" in fn.__name__ else (x, w)
    got = compiled(fn, options)(*args)
    want = fn(*args)
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    for g, e in zip(got, want):  # target "torch" reproduces eager's roundings: bit for bit
        assert g.dtype == e.dtype
        assert torch.equal(g, e), (f"{mojo_compile.last_report().counts()}: max |compiled - eager| "
                                   f"{(g.double() - e.double()).abs().max().item():.3g}")


def test_cohere_layer_norm_with_fp32_weight_cast_to_x_dtype_keeps_the_rounded_weight():
    """Cohere's spelling with `w.to(x.dtype)` for its `w.to(torch.float32)`. The op sums in another order than the
    spelling, so compare with fp64 math that makes eager's one rounding of the weight: the fused result must be as
    close to it as eager's is (within one output rounding), not the unrounded weight's result."""
    def cohere(x, w):
        h = x.to(torch.float32)
        mean = h.mean(-1, keepdim=True)
        var = (h - mean).pow(2).mean(-1, keepdim=True)
        h = (h - mean) * torch.rsqrt(var + 1e-5)
        return (w.to(x.dtype) * h).to(x.dtype)

    x = torch.randn(64, H, dtype=torch.bfloat16)
    w = 1 + 0.3 * torch.randn(H)
    got = compiled(cohere)(x, w)
    h = x.double()
    h = (h - h.mean(-1, keepdim=True)) / torch.sqrt(h.var(-1, unbiased=False, keepdim=True) + 1e-5)
    exact = w.to(torch.bfloat16).double() * h  # eager's values before its final rounding
    # eager rounds once to nearest: within half a bf16 spacing (plus fp32 noise, far below 1e-3 of a spacing)
    spacing = torch.exp2(torch.floor(torch.log2(exact.abs().clamp_min(2.0 ** -120))) - 7)
    bound = spacing * (0.5 + 1e-3)
    assert ((cohere(x, w).double() - exact).abs() <= bound).all()  # the reference is eager's
    off = (got.double() - exact).abs() > bound
    assert not off.any(), f"{mojo_compile.last_report().counts()}: {off.sum().item()} elements off by over half a spacing"


# ------------------------------------------------------------------------------------------------------------------
# Finding 2: canonicalize drops `x + 0` as an identity, but -0.0 + 0 is +0.0: the sign of a zero changes (1/x,
# copysign, atan2, signbit see it). Plain Inductor and aot_eager keep eager's +0.0.
def reciprocal_of_plus_zero(x):
    return 1.0 / (x + 0)


@pytest.mark.parametrize("options", [EAGER_INNER, {"target": "torch"}], ids=["eager_inner", "inductor_inner"])
def test_adding_zero_turns_negative_zero_positive_as_eager_does(options):
    x = torch.tensor([-0.0, 1.0, -2.0])
    got = compiled(reciprocal_of_plus_zero, options)(x)
    want = reciprocal_of_plus_zero(x)  # [inf, 1, -0.5]
    assert torch.equal(got, want), f"compiled {got.tolist()}, eager {want.tolist()}"
