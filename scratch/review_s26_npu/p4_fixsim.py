"""The suggested fixes, monkeypatched in; then test_findings.py and tests/test_npu.py are run against them."""
import sys
import conftest  # noqa: F401
import pytest
import torch
from mojo_compile.ops import attention, gated_act, rope
from mojo_compile.ops import rms_norm

old_attention_reason, old_rope_reason, old_swiglu_reason = attention._npu_reason, rope._npu_reason, gated_act._npu_reason


def attention_reason(q, k, v, mask, q_pos, scale, causal, window, softcap, sinks):
    reason = old_attention_reason(q, k, v, mask, q_pos, scale, causal, window, softcap, sinks)
    if reason:
        return reason
    heads, s_q, d = q.shape[1], q.shape[2], q.shape[-1]
    if v.shape != k.shape:
        return f"value {tuple(v.shape)} and key {tuple(k.shape)} differ in shape (FIA takes them equal)"
    if heads > 256 or d > 512 or (s_q != 1 and d % 16):
        return f"{heads} heads of dim {d}: FIA takes N <= 256, D <= 512, and D % 16 == 0 where Sq > 1"
    return None


def attention_forward(q, k, v, mask, q_pos, scale, causal, window, softcap, sinks):
    import torch_npu
    q, k, v = (t.contiguous() for t in (q, k, v))  # FIA: no non-contiguous query / key / value
    batch, heads, s_q, _ = q.shape
    keep, fia_mask = None, {}
    explicit = mask is not None or q_pos is not None or window or (causal and s_q > k.shape[2])
    structure = attention.structural_mask(q, k, q_pos, causal, window) if explicit else None
    if mask is not None or structure is not None:
        keep = structure if mask is None else attention._mask4(mask) if structure is None else attention._mask4(mask) & structure
        keep = attention._mask4(keep).expand(batch, 1, s_q, k.shape[2])
        fia_mask = dict(atten_mask=(~keep).contiguous(), sparse_mode=0)
    elif causal and s_q > 1:  # one query row at the bottom right sees every key: nothing to mask
        fia_mask = dict(atten_mask=attention._compressed_causal(q.device), sparse_mode=3)
    out, lse = torch_npu.npu_fused_infer_attention_score(
        q, k, v, num_heads=heads, num_key_value_heads=k.shape[1], input_layout="BNSD", scale=scale,
        softmax_lse_flag=True, **fia_mask)
    lse = lse.reshape(batch, heads, s_q).float()
    if keep is not None:
        any_key = keep.any(-1)
        out = torch.where(any_key[..., None], out, torch.zeros((), dtype=out.dtype, device=out.device))
        lse = torch.where(any_key, lse, torch.full((), float("-inf"), device=lse.device))
    return out.contiguous(), lse


def rope_reason(q, k, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last):
    reason = old_rope_reason(q, k, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last)
    if reason:
        return reason
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return f"npu_rotary_mul takes fp16/bf16/fp32, not {q.dtype}"
    if not interleaved:
        return None
    if cos.dim() == 3 and cos.shape[0] != 1:
        return "npu_rotary_mul's interleave mode takes tables shared by the batch only (11SD / 1S1D)"
    if q.shape[0] * max(q.shape[3 - seq_dim], k.shape[3 - seq_dim]) >= 1000:
        return "npu_rotary_mul's interleave mode takes B * N < 1000"
    return None


def swiglu_reason(gate_up, act, gate_first):
    reason = old_swiglu_reason(gate_up, act, gate_first)
    if reason:
        return reason
    if gate_up.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return f"npu_swiglu takes fp16/bf16/fp32, not {gate_up.dtype}"
    if gate_up.numel() == 0:
        return "npu_swiglu takes no empty tensor"
    return None


def swiglu_forward(gate_up, act, gate_first):
    import torch_npu
    return torch_npu.npu_swiglu(gate_up.contiguous(), dim=-1)


old_rms_reason = rms_norm._npu_reason


def rms_reason(x, weight, weight_offset, cast):
    reason = old_rms_reason(x, weight, weight_offset, cast)
    if reason:
        return reason
    if x.dim() < 2:
        return "npu_rms_norm takes 2-8 dims"
    if x.numel() == 0:  # npu_add_rms_norm takes no empty tensor (npu_rms_norm does: the add's check only, ideally)
        return "npu_add_rms_norm takes no empty tensor"
    return None


rms_norm._npu_reason = rms_reason
attention._npu_reason, attention.npu_forward = attention_reason, attention_forward
rope._npu_reason, gated_act._npu_reason, gated_act.npu_fused_forward = rope_reason, swiglu_reason, swiglu_forward
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-W", "ignore", "scratch/review_s26_npu/test_findings.py",
                      "tests/test_npu.py"]))
