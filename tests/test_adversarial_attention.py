"""Attention near-misses: spellings that look like a fused attention but compute something else. Each must give
eager's numbers, fused or not, and none may crash. Torch target and ttx (the interpreter on the CPU)."""
import pytest
import torch
import torch.nn.functional as F

import mojo_compile
from conftest import DEVICE, KERNEL_TARGET_OK

TARGETS = ["torch"] + (["ttx"] if KERNEL_TARGET_OK else [])


def compiled(fn, target, **kw):
    return torch.compile(fn, backend="mojo", options={"inner_compiler": "eager", "target": target}, **kw)


def sdpa_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("s_q,s_kv", [(3, 5), (1, 6), (5, 3)])
def test_sdpa_is_causal_with_unequal_lengths_is_torchs_top_left(s_q, s_kv, target):
    """torch aligns is_causal top-left (query i sees keys <= i); the op's causal is bottom-right: they differ
    unless s_q == s_kv, so these stay SDPA."""
    q = torch.randn(1, 2, s_q, 8, device=DEVICE)
    k, v = torch.randn(1, 2, s_kv, 8, device=DEVICE), torch.randn(1, 2, s_kv, 8, device=DEVICE)
    got = compiled(sdpa_causal, target)(q, k, v)
    assert "mojo.attention" not in mojo_compile.last_report().counts()
    torch.testing.assert_close(got, sdpa_causal(q, k, v))


@pytest.mark.parametrize("target", TARGETS)
def test_sdpa_is_causal_with_equal_lengths_still_fuses(target):
    q, k, v = (torch.randn(2, 2, 7, 8, device=DEVICE) for _ in range(3))
    got = compiled(sdpa_causal, target)(q, k, v)
    assert mojo_compile.last_report().counts() == {"mojo.attention": 1}
    torch.testing.assert_close(got, sdpa_causal(q, k, v), rtol=1e-5, atol=1e-5)  # fp32 throughout, order differs


@pytest.mark.parametrize("target", TARGETS)
def test_sdpa_is_causal_dynamic_rectangular(target):
    """Under dynamic=True q and k lengths are distinct symbols: not provably equal, so not fused."""
    q = torch.randn(1, 2, 3, 8, device=DEVICE)
    k, v = torch.randn(1, 2, 5, 8, device=DEVICE), torch.randn(1, 2, 5, 8, device=DEVICE)
    got = compiled(sdpa_causal, target, dynamic=True)(q, k, v)
    assert "mojo.attention" not in mojo_compile.last_report().counts()
    torch.testing.assert_close(got, sdpa_causal(q, k, v))


def scores_plus_bool(q, k, v, mask):
    """HF's eager attention spelling, with a bool mask where it adds a float one."""
    w = torch.matmul(q, k.transpose(2, 3)) * 0.25 + mask
    return torch.matmul(F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype), v)


@pytest.mark.parametrize("target", TARGETS)
def test_bool_mask_added_to_scores_adds_zero_or_one(target):
    """`scores + bool_mask` adds 0 / 1 in eager: not an attend-mask, so not fused (let alone proven causal)."""
    q, k, v = (torch.randn(1, 2, 6, 8, device=DEVICE) for _ in range(3))
    mask = torch.ones(6, 6, dtype=torch.bool, device=DEVICE).tril()
    got = compiled(scores_plus_bool, target)(q, k, v, mask)
    assert "mojo.attention" not in mojo_compile.last_report().counts()
    torch.testing.assert_close(got, scores_plus_bool(q, k, v, mask))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_value_head_size_differs(causal, target):
    """SDPA takes v with another head size than q and k (MLA-style); the op does not: no crash, eager's numbers."""
    q, k = torch.randn(1, 2, 5, 16, device=DEVICE), torch.randn(1, 2, 5, 16, device=DEVICE)
    v = torch.randn(1, 2, 5, 8, device=DEVICE)

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    got = compiled(fn, target)(q, k, v)
    assert "mojo.attention" not in mojo_compile.last_report().counts()
    torch.testing.assert_close(got, fn(q, k, v))


class LearnedBias(torch.nn.Module):
    """T5 / Swin style: a learnable attention bias used as the SDPA mask."""

    def __init__(self):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(1, 2, 6, 6))

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias)


@pytest.mark.parametrize("target", TARGETS)
def test_learnable_mask_keeps_its_gradient(target):
    """The op gives the mask no gradient: a mask that needs one is not fused (the check reads the graph inputs'
    requires_grad, which the pre-dispatch trace's fake values drop), and its gradient is eager's."""
    module = LearnedBias().to(DEVICE)
    q, k, v = (torch.randn(1, 2, 6, 8, device=DEVICE, requires_grad=True) for _ in range(3))
    out = compiled(module, target)(q, k, v)
    assert "mojo.attention" not in mojo_compile.last_report().counts()
    out.square().sum().backward()
    got = module.bias.grad.clone()
    module.bias.grad = None
    module(q, k, v).square().sum().backward()
    torch.testing.assert_close(got, module.bias.grad)


@pytest.mark.parametrize("target", TARGETS)
def test_detached_bias_still_fuses(target):
    module = LearnedBias().to(DEVICE)

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=module.bias.detach())

    q, k, v = (torch.randn(1, 2, 6, 8, device=DEVICE) for _ in range(3))
    got = compiled(fn, target)(q, k, v)
    assert mojo_compile.last_report().counts() == {"mojo.attention": 1}
    torch.testing.assert_close(got, fn(q, k, v), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ambient", [False, True])
def test_autocast_gives_the_autocast_dtype(ambient, target):
    """Under torch.autocast SDPA computes in the autocast dtype (its inputs are cast): so does the op, whether the
    region is inside the compiled code or around the call. Tolerance: both round the output to bf16 once from fp32
    arithmetic (2 bf16 ulps apart at most, 2**-7 relative)."""
    def inner(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def region(q, k, v):
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            return inner(q, k, v)

    q, k, v = (torch.randn(2, 2, 7, 16, device=DEVICE) for _ in range(3))
    if ambient:
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            got = compiled(inner, target)(q, k, v)
            ref = inner(q, k, v)
    else:
        got, ref = compiled(region, target)(q, k, v), region(q, k, v)
    assert mojo_compile.last_report().counts() == {"mojo.attention": 1}
    assert got.dtype == ref.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), ref.float(), rtol=2 ** -7, atol=2 ** -7)


def sdpa_masked(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.float32])
def test_nan_in_q_propagates_with_a_mask_tensor(mask_dtype):
    """Eager gives the row of a NaN query NaN; the torch reference keeps it (only rows with nothing allowed are 0,
    the op's contract). Torch target: the Triton kernels' NaN behaviour is not covered here."""
    q, k, v = (torch.randn(1, 2, 5, 8, device=DEVICE) for _ in range(3))
    q[0, 1, 2, 3] = float("nan")
    allowed = torch.rand(1, 1, 5, 5, device=DEVICE) > 0.3
    allowed[..., 0] = True
    mask = allowed if mask_dtype == torch.bool else torch.zeros(allowed.shape, device=DEVICE).masked_fill(
        ~allowed, torch.finfo(torch.float32).min)
    got = compiled(sdpa_masked, "torch")(q, k, v, mask)
    assert mojo_compile.last_report().counts() == {"mojo.attention": 1}
    ref = sdpa_masked(q, k, v, mask)
    assert torch.equal(torch.isnan(got), torch.isnan(ref)) and torch.isnan(got[0, 1, 2]).all()
    torch.testing.assert_close(got.nan_to_num(7.0), ref.nan_to_num(7.0), rtol=1e-5, atol=1e-5)
