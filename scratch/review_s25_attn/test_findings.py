"""Confirmed findings of review s25 (prefill attention and RoPE). Each test asserts the correct behaviour and fails
on the code reviewed (tree at 2026-12-04 20:18 UTC)."""
from conftest import DEVICE, KERNEL_TARGET_OK, TARGETS, mojo_options  # first: sets TRITON_INTERPRET, MOJO_CACHE_DIR

import pytest
import torch
import torch.nn.functional as F

import mojo_compile


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()
    mojo_compile.reset_report()
    yield
    torch._dynamo.reset()


def repeat_kv(x, n_rep):
    b, h, s, d = x.shape
    return x[:, :, None].expand(b, h, n_rep, s, d).reshape(b, h * n_rep, s, d)


def gemma2_attention_softcap_zero(q, k, v, mask):
    """Gemma2's eager attention with attn_logit_softcapping = 0.0: tanh(s / 0) * 0 zeroes every score."""
    k, v = repeat_kv(k, 2), repeat_kv(v, 2)
    w = torch.matmul(q, k.transpose(2, 3)) * 0.35
    w = torch.tanh(w / 0.0) * 0.0
    w = w + mask
    w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(w, v)


@pytest.mark.parametrize("target", TARGETS)
def test_softcap_of_zero_is_not_taken_for_no_softcap(target):
    """Finding 1 (wrong number): the matcher captures softcap_value = 0.0 and the op reads softcap 0 as 'no softcap',
    while eager's tanh(s / 0) * 0 makes every score 0 (uniform attention over the unmasked keys)."""
    torch.manual_seed(0)
    q = torch.randn(2, 4, 6, 8, device=DEVICE) * 4
    k, v = (torch.randn(2, 2, 6, 8, device=DEVICE) for _ in range(2))
    i = torch.arange(6, device=DEVICE)
    mask = torch.where(i[None, :] <= i[:, None], 0.0, float("-inf"))[None, None].expand(2, 1, 6, 6).contiguous()
    compiled = torch.compile(gemma2_attention_softcap_zero, backend="mojo", options=mojo_options(target))
    got = compiled(q, k, v, mask)
    exact = gemma2_attention_softcap_zero(q.double(), k.double(), v.double(), mask.double())
    # fp32 against fp64: a softmax of 6 keys and a 6-term sum, so 1e-5 is ~100 ulp of headroom
    torch.testing.assert_close(got.double(), exact, rtol=1e-5, atol=1e-5)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def partial_rope_slicing_twice(q, k, cos, sin):
    """GPT-NeoX's partial rotary, written with `x[..., :rot]` at each use instead of once in a variable."""
    c, s = cos.unsqueeze(1), sin.unsqueeze(1)
    rot = cos.shape[-1]
    q = torch.cat([q[..., :rot] * c + rotate_half(q[..., :rot]) * s, q[..., rot:]], -1)
    k = torch.cat([k[..., :rot] * c + rotate_half(k[..., :rot]) * s, k[..., rot:]], -1)
    return q, k


def test_partial_rope_with_the_rotated_slice_taken_twice_fuses():
    """Finding 4 (missed fusion): the same partial rotary with the slice bound to a variable fuses into mojo.rope;
    slicing at each use leaves two identical slice nodes the pattern (one slice) does not match."""
    torch.manual_seed(0)
    q, k = torch.randn(2, 4, 7, 16), torch.randn(2, 2, 7, 16)
    cos, sin = torch.randn(2, 7, 4), torch.randn(2, 7, 4)
    compiled = torch.compile(partial_rope_slicing_twice, backend="mojo", options=mojo_options("torch"))
    got = compiled(q, k, cos, sin)
    for g, r in zip(got, partial_rope_slicing_twice(q, k, cos, sin)):
        assert torch.equal(g, r)
    assert mojo_compile.last_report().counts() == {"mojo.rope": 1}


def sdpa_on_transposed_views(q_t, k_t, v_t):
    """q, k, v kept as [B, H, D, S] (a cache that stores K^T, say): their [B, H, S, D] views have a non-unit last
    stride."""
    return F.scaled_dot_product_attention(q_t.transpose(2, 3), k_t.transpose(2, 3), v_t.transpose(2, 3),
                                          is_causal=True)


def eager_attention_on_a_transposed_v(q, k, v_t):
    w = torch.matmul(q, k.transpose(2, 3)) * 0.35
    return torch.matmul(F.softmax(w, dim=-1, dtype=torch.float32), v_t.transpose(2, 3))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("spelling", ["sdpa", "eager"])
def test_attention_on_views_with_a_non_unit_last_stride_is_eagers(spelling, target):
    """Finding 2 (wrong number): the torch reference sends the plain (unmasked) case to
    aten._scaled_dot_product_flash_attention_for_cpu as it comes; that kernel reads q/k/v as if their last stride
    were 1 (eager's SDPA makes them so before dispatching there). ttx refuses such strides and falls back to the
    same reference."""
    torch.manual_seed(0)
    b, h, s, d = 2, 4, 6, 8
    if spelling == "sdpa":
        fn, args = sdpa_on_transposed_views, [torch.randn(b, h, d, s, device=DEVICE) for _ in range(3)]
    else:
        fn = eager_attention_on_a_transposed_v
        args = [torch.randn(b, h, s, d, device=DEVICE), torch.randn(b, h, s, d, device=DEVICE),
                torch.randn(b, h, d, s, device=DEVICE)]
    compiled = torch.compile(fn, backend="mojo", options=mojo_options(target))
    got = compiled(*args)
    assert mojo_compile.last_report().counts() == {"mojo.attention": 1}
    exact = fn(*(a.double() for a in args)) if spelling == "sdpa" else \
        torch.matmul(torch.softmax(args[0].double() @ args[1].double().transpose(2, 3) * 0.35, -1),
                     args[2].double().transpose(2, 3))
    # fp32 against fp64: softmax over 6 keys, 8-wide dot products; 1e-5 is ~100 ulp of headroom
    torch.testing.assert_close(got.double(), exact, rtol=1e-5, atol=1e-5)


def softcapped_attention_negative_cap(q, k, v, mask):
    """A logit softcap written with a negative constant: c * tanh(s / c) is the same function for c and -c."""
    w = torch.matmul(q, k.transpose(2, 3)) * 0.35
    w = torch.tanh(w / -5.0) * -5.0 + mask
    return torch.matmul(F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype), v)


@pytest.mark.skipif(not KERNEL_TARGET_OK, reason="needs the Triton kernels (GPU or TRITON_INTERPRET=1)")
def test_negative_softcap_is_applied_by_the_kernel(target="ttx"):
    """Finding 3 (wrong number, ttx): the matcher passes softcap = -5.0; the torch reference applies it
    (`if softcap:`, so target "torch" is right), the Triton kernel's HAS_SOFTCAP = softcap > 0.0 drops it
    (kernels/attention.py:769)."""
    torch.manual_seed(0)
    q, k = (torch.randn(2, 4, 6, 8, device=DEVICE) * 4 for _ in range(2))
    v = torch.randn(2, 4, 6, 8, device=DEVICE)
    i = torch.arange(6, device=DEVICE)
    mask = torch.where(i[None, :] <= i[:, None], 0.0, float("-inf"))[None, None].expand(2, 1, 6, 6).contiguous()
    compiled = torch.compile(softcapped_attention_negative_cap, backend="mojo", options=mojo_options(target))
    got = compiled(q, k, v, mask)
    exact = softcapped_attention_negative_cap(q.double(), k.double(), v.double(), mask.double())
    # fp32 against fp64 (softmax over at most 6 keys): 1e-5 is ~100 ulp of headroom
    torch.testing.assert_close(got.double(), exact, rtol=1e-5, atol=1e-5)
