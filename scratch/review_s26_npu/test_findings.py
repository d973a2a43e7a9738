"""Confirmed findings of review s26 (torch_npu lowering). There is no NPU here: torch_npu is stood in for by
fake_torch_npu.py, which computes each op's documented formula in fp64 and raises `Refused` where the op-plugin
documentation says the op does not take the input. Each test asserts the contract of the target -- an input the
documented op cannot take falls back to the torch reference (its `supports` gives a reason), else the op is called
within its documented contract and gives the reference's numbers -- and fails on the current code.
Run from /work/main: PYTHONPATH=tests:. MOJO_CACHE_DIR=/tmp/npu_cache python -m pytest -q \
    scratch/review_s26_npu/test_findings.py"""
import os
import sys

import conftest  # sets TRITON_INTERPRET / MOJO_CACHE_DIR before mojo_compile loads
import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
import fake_torch_npu as fake  # noqa: E402

from mojo_compile.ops import attention, gated_act, rope  # noqa: E402

del conftest  # imported for its side effects only


@pytest.fixture(autouse=True)
def torch_npu(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", fake.module())
    fake.CALLS.clear()
    yield


def taken_right_or_refused(reason_fn, forward, reference, args, npu_args, ulp_bound=None):
    """The target's contract for one call: `supports` (on npu stand-ins) gives a reason -- the call falls back --
    or the mapping calls the documented op within its contract and matches the reference."""
    reason = reason_fn(*npu_args)
    if reason is not None:
        return
    try:
        outs = forward(*args)
    except fake.Refused as e:
        pytest.fail(f"supports() accepted the call, but the documented op does not take it: {e}")
    refs = reference(*args)
    for out, ref in zip(outs if isinstance(outs, tuple) else (outs,), refs if isinstance(refs, tuple) else (refs,)):
        assert out.shape == ref.shape and out.dtype == ref.dtype
        torch.testing.assert_close(out.float(), ref.float(), rtol=2e-2, atol=2e-2)


def on_npu(args):
    return tuple(fake.on_npu(a) if isinstance(a, torch.Tensor) else a for a in args)


def qkv(b, h, hkv, sq, skv, d, dv=None, dtype=torch.bfloat16):
    return (torch.randn(b, h, sq, d, dtype=dtype), torch.randn(b, hkv, skv, d, dtype=dtype),
            torch.randn(b, hkv, skv, dv or d, dtype=dtype))


# ------------------------------------------------------------------------------------------------ attention (FIA)
@pytest.mark.parametrize("batch", [1, 2])
def test_decode_causal_passes_no_compressed_mask_to_the_incre_branch(batch):
    """Sq = 1 with causal: FIA runs its IncreFlashAttention branch, where "Q_S = 1且不带rope输入时，sparse_mode参数无效"
    and a mask is (B, KV_S) / (B, 1, 1, KV_S). The mapping passes sparse_mode 3 with the (2048, 2048) mask; CANN's
    IFA tiling (cann_ops_adv incre_flash_attention_tiling_check.cc ProcessAttenMask) then fails with "batchSize of
    atten_mask must be equal to batchSize of query" (and with B = 2048 would read row b of the triangle as batch b's
    key mask). One query row at the bottom right sees every key: no mask is needed."""
    args = (*qkv(batch, 4, 2, 1, 9, 16), None, None, 0.25, True, 0, 0.0, None)
    taken_right_or_refused(attention._npu_reason, attention.npu_forward, attention.reference, args, on_npu(args))


@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_attention_hands_fia_contiguous_q_k_v(which):
    """HF's q / k / v reach mojo::attention as transposed views (p2_strides.py: strides (384, 16, 64, 1)); FIA's
    doc: query/key/value "不支持非连续Tensor" (non-contiguous tensors not supported)."""
    q, k, v = qkv(2, 4, 2, 6, 6, 16)
    tensors = dict(q=q, k=k, v=v)
    tensors[which] = tensors[which].transpose(1, 2).contiguous().transpose(1, 2)
    args = (tensors["q"], tensors["k"], tensors["v"], None, None, 0.25, True, 0, 0.0, None)
    taken_right_or_refused(attention._npu_reason, attention.npu_forward, attention.reference, args, on_npu(args))


@pytest.mark.parametrize("case", ["dv_ne_d", "d24_prefill", "d8_prefill", "d576", "heads320"])
def test_attention_shapes_fia_cannot_take_fall_back(case):
    """FIA's documented limits: "`key`与`value`的shape必须完全一致" (Dv == D: DeepSeek MLA's sdpa has 192 / 128);
    Q_S > 1: "N轴：≤ 256", "D轴：≤ 512", fp16/bf16 D 16-aligned; Q_S = 1: N <= 256, D <= 512. `_npu_reason` checks
    none of these: the call reaches FIA and fails instead of falling back."""
    shapes = {"dv_ne_d": (2, 4, 2, 6, 6, 32, 16), "d24_prefill": (2, 4, 2, 6, 6, 24, None),
              "d8_prefill": (1, 2, 2, 5, 5, 8, None), "d576": (1, 2, 2, 4, 4, 576, None),
              "heads320": (1, 320, 64, 4, 4, 16, None)}[case]
    args = (*qkv(*shapes), None, None, 0.25, True, 0, 0.0, None)
    taken_right_or_refused(attention._npu_reason, attention.npu_forward, attention.reference, args, on_npu(args))


# ------------------------------------------------------------------------------------------------ rope
@pytest.mark.parametrize("seq_dim", [1, 2])
def test_interleaved_rope_with_per_batch_tables_falls_back(seq_dim):
    """npu_rotary_mul, interleave mode: r1/r2 "x为BNSD: 11SD; x为BSND: 1S1D" only (half mode also takes B1SD / BS1D).
    HF's rotary embedding gives cos/sin [B, S, D] (per position_ids); with B > 1 the mapping passes a B1SD / BS1D
    table to the interleave mode."""
    shape_q = (2, 5, 4, 32) if seq_dim == 1 else (2, 4, 5, 32)
    shape_k = (2, 5, 2, 32) if seq_dim == 1 else (2, 2, 5, 32)
    q, k = torch.randn(shape_q, dtype=torch.bfloat16), torch.randn(shape_k, dtype=torch.bfloat16)
    angles = (torch.rand(2, 5, 16) * 6).repeat_interleave(2, -1)
    args = (q, k, angles.cos().to(torch.bfloat16), angles.sin().to(torch.bfloat16), 32, True, seq_dim, False)
    taken_right_or_refused(rope._npu_reason, rope.npu_forward, rope.reference, args, on_npu(args))


def test_interleaved_rope_batch_times_heads_limit():
    """npu_rotary_mul, interleave mode: "B*N < 1000" (half mode: "B, N < 1000"); `_npu_reason` checks
    max(B, N) < 1000 for both modes: B = 40, N = 32 reaches the op."""
    q, k = torch.randn(40, 2, 32, 16, dtype=torch.bfloat16), torch.randn(40, 2, 8, 16, dtype=torch.bfloat16)
    angles = (torch.rand(2, 8) * 6).repeat_interleave(2, -1)
    args = (q, k, angles.cos().to(torch.bfloat16), angles.sin().to(torch.bfloat16), 16, True, 1, False)
    taken_right_or_refused(rope._npu_reason, rope.npu_forward, rope.reference, args, on_npu(args))


# ------------------------------------------------------------------------------------------------ swiglu
@pytest.mark.parametrize("case", ["non_contiguous", "empty", "fp64"])
def test_swiglu_inputs_npu_swiglu_cannot_take_fall_back(case):
    """npu_swiglu's doc: input "不支持非连续的Tensor，不支持空Tensor。数据类型支持float32、float16或bfloat16";
    `_npu_reason` checks only the activation and the device."""
    gate_up = {"non_contiguous": torch.randn(5, 3, 96, dtype=torch.bfloat16).transpose(0, 1),
               "empty": torch.randn(0, 96, dtype=torch.bfloat16),
               "fp64": torch.randn(4, 96, dtype=torch.float64)}[case]
    args = (gate_up, "silu", True)
    taken_right_or_refused(gated_act._npu_reason, gated_act.npu_fused_forward, gated_act.fused_reference, args,
                           on_npu(args))


# ------------------------------------------------------------------------------------------------ rms norm
@pytest.mark.parametrize("case", ["rms_norm_1d", "add_rms_norm_empty"])
def test_rms_norm_inputs_the_npu_ops_cannot_take_fall_back(case):
    """npu_rms_norm's doc: self "shape支持2-8维度" (a 1-D x is not taken); npu_add_rms_norm's: x1 / x2
    "不支持空Tensor". `_npu_reason` checks neither."""
    from mojo_compile.ops import rms_norm

    w = torch.randn(64, dtype=torch.bfloat16)
    if case == "rms_norm_1d":
        args = (torch.randn(64, dtype=torch.bfloat16), w, 1e-6, 0.0, "output")
        forward, reference = rms_norm.npu_forward, rms_norm.reference

        def reason(x, weight, eps, offset, cast):
            return rms_norm._npu_reason(x, weight, offset, cast)
    else:
        x = torch.randn(0, 64, dtype=torch.bfloat16)
        args = (x, x.clone(), w, 1e-6, 0.0, "output")
        forward, reference = rms_norm.npu_add_forward, rms_norm.add_reference

        def reason(x, residual, weight, eps, offset, cast):
            return rms_norm._npu_reason(x, weight, offset, cast)
    taken_right_or_refused(reason, forward, reference, args, on_npu(args))


def test_fp64_rope_falls_back():
    """npu_rotary_mul's doc: input / r1 / r2 "数据类型支持float16，bfloat16，float32"; `_npu_reason` only asks that
    cos/sin have q's dtype, so fp64 q and tables reach the op."""
    q, k = torch.randn(2, 5, 4, 32, dtype=torch.float64), torch.randn(2, 5, 2, 32, dtype=torch.float64)
    angles = torch.cat([torch.rand(5, 16) * 6] * 2, -1).double()
    args = (q, k, angles.cos(), angles.sin(), 32, False, 1, False)
    taken_right_or_refused(rope._npu_reason, rope.npu_forward, rope.reference, args, on_npu(args))
