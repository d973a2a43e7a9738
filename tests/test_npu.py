"""The torch_npu target's attention without an NPU. torch_npu is stood in for by a module whose
npu_fused_infer_attention_score implements the documented semantics (../shared/reference/seed-contracts.md) in fp64,
written here independently of our reference: BNSD, GQA by num_key_value_heads, atten_mask True = masked OUT, sparse
mode 3 = bottom-right causal from the compressed 2048 x 2048 mask, the row log-sum-exp, and NaN on a row with no key
(the worst a kernel could return there). So these tests check our mapping -- argument names, mask polarity, the
explicit scale, the structure turned into masks, the op's empty rows -- against the torch reference of the op."""
import importlib
import sys
import types

import pytest
import torch

from mojo_compile.lowering import reference

CALLS = []


def fused_infer_attention_score(query, key, value, *, atten_mask=None, num_heads=1, scale=1.0, input_layout="BSH",
                                num_key_value_heads=0, sparse_mode=0, softmax_lse_flag=False, **unused):
    assert input_layout == "BNSD" and not unused, (input_layout, unused)
    CALLS.append(dict(scale=scale, sparse_mode=sparse_mode, mask=atten_mask))
    batch, heads, s_q, _ = query.shape
    s_kv = key.shape[2]
    assert num_heads == heads and key.shape[1] == num_key_value_heads and heads % num_key_value_heads == 0
    group = heads // num_key_value_heads
    k, v = (t.double().repeat_interleave(group, 1) for t in (key, value))
    scores = query.double() @ k.transpose(-1, -2) * scale
    if sparse_mode == 3:  # rightDownCausal: query i sees keys up to i + (Skv - Sq)
        assert torch.equal(atten_mask, torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1))
        masked = torch.arange(s_kv)[None, :] > torch.arange(s_q)[:, None] + (s_kv - s_q)
    else:
        assert sparse_mode == 0
        masked = atten_mask if atten_mask is not None else torch.zeros(s_q, s_kv, dtype=torch.bool)
        assert masked.dtype == torch.bool
    scores = scores.masked_fill(masked, float("-inf"))
    lse = torch.logsumexp(scores, -1, keepdim=True)
    out = torch.exp(scores - lse) @ v  # NaN where a row has no key
    return out.to(query.dtype), (lse.float() if softmax_lse_flag else torch.empty(0))


@pytest.fixture
def npu(monkeypatch):
    stand_in = types.ModuleType("torch_npu")
    stand_in.npu_fused_infer_attention_score = fused_infer_attention_score
    monkeypatch.setitem(sys.modules, "torch_npu", stand_in)
    sys.modules.pop("mojo_compile.lowering.npu", None)
    CALLS.clear()
    yield importlib.import_module("mojo_compile.lowering.npu")
    sys.modules.pop("mojo_compile.lowering.npu", None)  # later imports see the real (missing) torch_npu again


def qkv(s_q, s_kv, batch=2, heads=4, kv_heads=2, d=16, dtype=torch.float32):
    q = torch.randn(batch, heads, s_q, d, dtype=dtype)
    return (q, *(torch.randn(batch, kv_heads, s_kv, d, dtype=dtype) for _ in range(2)))


CASES = {  # name: (s_q, s_kv, mask_of(batch, s_q, s_kv) or None, q_pos, causal, window, sparse mode expected)
    "causal": (6, 6, None, None, True, 0, 3),
    "causal_decode": (1, 9, None, None, True, 0, 3),
    "causal_chunk": (3, 9, None, None, True, 0, 3),
    "full": (5, 7, None, None, False, 0, None),
    "positions": (1, 9, None, [4], True, 0, 0),  # a static cache filled up to position 4
    "window": (7, 7, None, None, True, 3, 0),
    "mask": (5, 7, lambda b, sq, skv: torch.rand(b, 1, sq, skv) > 0.3, None, False, 0, 0),
    "mask_and_causal": (5, 7, lambda b, sq, skv: torch.rand(sq, skv) > 0.3, None, True, 0, 0),
}


@pytest.mark.parametrize("case", list(CASES))
def test_attention_matches_the_reference(npu, case):
    s_q, s_kv, make_mask, q_pos, causal, window, mode = CASES[case]
    q, k, v = qkv(s_q, s_kv)
    mask = make_mask(2, s_q, s_kv) if make_mask else None
    if mask is not None:
        mask[..., 1, :] = False  # a query row with no key at all
    before = None if mask is None else mask.clone()
    positions = torch.tensor(q_pos) if q_pos else None
    args = (q, k, v, mask, positions, 0.3, causal, window, 0.0, None)
    out, lse = npu.attention(*args)
    ref_out, ref_lse = reference.attention(*args)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lse, ref_lse, rtol=1e-5, atol=1e-6)  # -inf where a row has no key
    (call,) = CALLS
    assert call["scale"] == 0.3 and call["sparse_mode"] == (mode if mode is not None else 0)
    assert (call["mask"] is None) == (mode is None)
    if mask is not None:
        assert torch.equal(mask, before)  # the user's mask is read, not inverted in place


def test_attention_reasons(npu):
    """What FIA cannot take falls back to the torch reference, with the reason."""
    q, k, v = qkv(4, 4, dtype=torch.bfloat16)
    reason = npu.TABLE["attention"].supports
    plain = (q, k, v, None, None, 0.25, True, 0, 0.0, None)
    assert "npu tensors" in reason(*plain)  # everything else would be taken
    assert "fp16/bf16" in reason(q.float(), k.float(), v.float(), *plain[3:])
    assert "softcap" in reason(*plain[:8], 30.0, None)
    assert "sinks" in reason(*plain[:9], torch.zeros(4))
    assert "additive" in reason(q, k, v, torch.zeros(4, 4), *plain[4:])
    assert "per-head" in reason(q, k, v, torch.ones(1, 4, 4, 4, dtype=torch.bool), *plain[4:])
    q3, k3, v3 = qkv(4, 4, heads=6, kv_heads=4, dtype=torch.bfloat16)
    assert "kv heads" in reason(q3, k3, v3, *plain[3:])
