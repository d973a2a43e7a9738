"""Review s25 (decode path): each test asserts the correct behaviour and fails on the reviewed tree (63a62d2).

Run: cd /work/main && MOJO_CACHE_DIR=/tmp/rev25d_cache PYTHONPATH=tests:. timeout 600 .venv/bin/python -m pytest -q \
         -p no:cacheprovider -W ignore scratch/review_s25_decode/test_findings.py
"""
import pytest
import torch
import torch.nn.functional as F

from conftest import TARGETS, mojo_options  # (first: it sets TRITON_INTERPRET before the kernels are defined)
import mojo_compile


@pytest.fixture(autouse=True)
def _fresh_state():
    """tests/conftest.py's fixture of that name is not collected from this folder: no Dynamo cache, an empty
    report, for each test."""
    torch._dynamo.reset()
    mojo_compile.reset_report()


def compiled(fn, target, **kwargs):
    return torch.compile(fn, backend="mojo", options=mojo_options(target), **kwargs)


def details():
    return [s.detail for s in mojo_compile.last_report().sites]


def ops():
    return [s.op for s in mojo_compile.last_report().sites]


# ---------------------------------------------------------------------------------------------- 1. wrong number
def offset_positions(q, k, v, cp):
    """Query positions cp + 100 + i: `cp + 100` is computed in cp's dtype (a uint8 / int16 0-d tensor wraps), then
    promoted to int64 by the arange."""
    j = torch.arange(k.shape[2], device=q.device)
    pos = (cp + 100)[None] + torch.arange(q.shape[2], device=q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=j[None, :] <= pos[:, None])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype,value", [(torch.uint8, 160), (torch.int16, 32700)], ids=["uint8", "int16"])
def test_positions_of_a_narrow_integer_dtype_wrap_as_eager(dtype, value, target):
    """mask_algebra models integer tensors as unbounded integers and _query_positions re-associates the sum
    (int64 arange first, the constant last), so eager's wrap of `cp + 100` in cp's dtype is lost: uint8 160 + 100
    is 4 in eager (keys 0..4+i), 260 in the op (every key); int16 32700 + 100 is negative (no key: 0) in eager."""
    q = torch.randn(1, 2, 3, 8)
    k, v = torch.randn(1, 2, 300, 8), torch.randn(1, 2, 300, 8)
    cp = torch.tensor(value, dtype=dtype)
    want = offset_positions(q, k, v, cp)
    got = compiled(offset_positions, target)(q, k, v, cp)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)  # fp32 both: summation order only


# ------------------------------------------------------------------------------------------ 2. missed fusions
def causal_and_padding(q, k, v, am):
    s = q.shape[2]
    i = torch.arange(s, device=q.device)[:, None]
    j = torch.arange(s, device=q.device)[None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=(j <= i)[None, None] & am[:, None, None, :].bool())


@pytest.mark.parametrize("dynamic", [False, True])
def test_batch_one_attention_mask_is_proven_causal_with_key_padding(dynamic):
    """Batch 1 with an attention_mask input (HF's `model(**tokenizer(prompt))`): proven at batch 2, kept as a tensor
    at batch 1 -- the broadcast pins the size-1 batch index of attention_mask to 0, and `_key_padding` only takes
    `am(X0, X3) != 0`."""
    q, k, v = (torch.randn(1, 2, 6, 8) for _ in range(3))
    am = torch.ones(1, 6, dtype=torch.long)
    am[0, :2] = 0
    got = compiled(causal_and_padding, "torch", dynamic=dynamic)(q, k, v, am)
    torch.testing.assert_close(got, causal_and_padding(q, k, v, am), rtol=1e-5, atol=1e-5)
    assert details() == ["mask: causal + key padding (proven from the mask subgraph)"], details()


def sliced_qkv(x, qkv):
    """A fused qkv weight sliced where each projection reads it: Dynamo traces each slice right before its linear."""
    return F.linear(x, qkv[:8]), F.linear(x, qkv[8:12]), F.linear(x, qkv[12:16])


def test_projections_of_slices_of_one_weight_are_grouped():
    """The slices are views of a graph input, made after q's projection: linear.group skips k and v (`order[weight]
    >= order[first]`), three launches instead of one."""
    x, qkv = torch.randn(2, 1, 16), torch.randn(16, 16)
    with torch.no_grad():
        got = compiled(sliced_qkv, "torch")(x, qkv)
        for g, e in zip(got, sliced_qkv(x, qkv)):
            assert torch.equal(g, e)
    assert ops() == ["mojo.linear3"], ops()


def test_x_at_w_mT_is_a_decode_projection():
    """`x @ w.mT` (aten.mT) is the same view as `w.t()` for a 2-D w, which the canonicaliser folds for `.T`,
    `transpose` and `permute` but not for `mT`."""
    def fn(x, w):
        return x @ w.mT

    x, w = torch.randn(2, 16), torch.randn(12, 16)
    with torch.no_grad():
        assert torch.equal(compiled(fn, "torch")(x, w), fn(x, w))
    assert ops() == ["mojo.linear"], ops()


def static_cache_mask(q, k, v, cp, am):
    """HF 5.x's mask for a StaticCache (masking_utils): attention_mask padded with 0 to the cache length (the unfilled
    slots), then `kv <= cache_position[q]` and `padding[b, kv]`."""
    am = F.pad(am, (0, k.shape[2] - am.shape[1]))
    j = torch.arange(k.shape[2], device=q.device)
    mask = (j[None, None, None, :] <= cp[None, None, :, None]) & am[:, None, None, :].bool()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_static_cache_mask_with_a_padded_attention_mask_is_proven():
    """Without the F.pad the same mask is proven ("causal at the query positions ... + key padding"); with it,
    mask_algebra has no rule for aten.pad and the whole mask stays a tensor, so a decode step reads every slot of
    the cache instead of the slots up to its position."""
    q = torch.randn(2, 2, 1, 8)
    k, v = torch.randn(2, 2, 16, 8), torch.randn(2, 2, 16, 8)
    cp = torch.tensor([7])
    am = torch.ones(2, 8, dtype=torch.long)
    am[1, :3] = 0
    got = compiled(static_cache_mask, "torch")(q, k, v, cp, am)
    torch.testing.assert_close(got, static_cache_mask(q, k, v, cp, am), rtol=1e-5, atol=1e-5)
    assert all(d.startswith("mask: causal at the query positions") for d in details()), details()
