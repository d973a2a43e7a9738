"""Target `torch_npu`: Ascend's fused ops (docs/seed-contracts.md). The table loads only where
torch_npu imports; asking for this target elsewhere is a clear error (backend.resolve_target).

npu_rms_norm / npu_add_rms_norm compute in fp32 and round once at the end ("output" numerics). The Llama spelling
("normed") rounds the normalised value before the weight multiply, so it runs the NPU op with a unit gamma (which is
exactly that rounded value) and multiplies by the weight afterwards.

npu_swiglu takes the fused gate_up tensor (silu of its first half times the second), so only the fused SwiGLU form
with the gate first maps onto it; the two-tensor form would need a cat and runs on the torch reference.

Attention runs on npu_fused_infer_attention_score (FIA) for prefill and decode alike: unlike npu_fusion_attention
(max and sum, in its own layout) and npu_incre_flash_attention (nothing), it returns the row log-sum-exp the op owes
(softmax_lse_flag). GQA is native (num_key_value_heads), the scale is always passed (FIA's default is 1.0), and Ascend
masks mean the opposite of ours: True = masked out. Plain causal is sparse_mode 3 (bottom-right, as the op's) with the
compressed 2048 x 2048 mask; positions, windows and mask tensors become one explicit bool mask (sparse_mode 0).
Rows left with no key get the op's zeros and -inf by a where on the device, whatever FIA returns for them.

Backward ops have no entry here: they run on the torch reference (logged once). The cross-entropy loss and its
backward are listed with the torch reference as their implementation (no torch_npu op is mapped yet). None of
this has run on an NPU here; tests/test_npu.py checks every mapping against stand-ins that implement the
documented semantics.
"""
from __future__ import annotations

import functools

import torch
import torch_npu  # noqa: F401  (an ImportError marks the target unavailable, with this reason)

from ..ops.rms_norm import rms_norm_out_dtype
from . import reference
from .table import Table

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
TABLE = Table("torch_npu")  # each op's entry registered below its implementation


def _reason(x, weight, weight_offset, cast):
    if x.device.type != "npu":
        return f"torch_npu runs on npu tensors, not {x.device.type}"
    if x.dtype not in FLOAT_DTYPES:
        return f"input dtype {x.dtype} is not fp16/bf16/fp32"
    if cast == "rstd" and x.dtype != torch.float32:
        return "npu_rms_norm does not round the inverse root to the input dtype (cast='rstd')"
    if weight is not None and weight.dtype != x.dtype and cast != "normed":
        return f"npu_rms_norm takes gamma in the input dtype ({x.dtype}), the weight is {weight.dtype}"
    if weight_offset and cast != "normed" and x.dtype != torch.float32:
        return "gamma = 1 + w would be rounded to the input dtype before npu_rms_norm uses it"
    return None


def _gamma(x, weight, weight_offset, cast):
    if weight is None or cast == "normed":
        return torch.ones(x.shape[-1], dtype=x.dtype, device=x.device)
    return weight + weight_offset if weight_offset else weight


def _finish(y, x, weight, weight_offset, cast):
    if cast == "normed" and weight is not None:  # Llama: the weight multiplies the rounded normalised value
        y = (y.float() * (weight.float() + weight_offset)).to(rms_norm_out_dtype(x, weight, cast))
    return y


def rms_norm(x, weight, eps, weight_offset, cast):
    y, rstd = torch_npu.npu_rms_norm(x, _gamma(x, weight, weight_offset, cast), epsilon=eps)
    return _finish(y, x, weight, weight_offset, cast), rstd.reshape(x.shape[:-1]).float()


def add_rms_norm(x, residual, weight, eps, weight_offset, cast):
    y, rstd, total = torch_npu.npu_add_rms_norm(x, residual, _gamma(x, weight, weight_offset, cast), epsilon=eps)
    return _finish(y, total, weight, weight_offset, cast), total, rstd.reshape(x.shape[:-1]).float()


TABLE.implement("rms_norm", rms_norm, supports=lambda x, weight, eps, offset, cast: _reason(x, weight, offset, cast))
TABLE.implement("add_rms_norm", add_rms_norm,
                supports=lambda x, r, weight, eps, offset, cast: _reason(x, weight, offset, cast))


def _rope_reason(q, k, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last):
    if rotary_dim != q.shape[-1]:
        return "npu_rotary_mul rotates the whole head (partial rotary runs on the torch reference)"
    if cos.dtype != q.dtype or k.dtype != q.dtype:
        return f"npu_rotary_mul takes cos/sin in the dtype of q ({q.dtype}), not {cos.dtype}"
    if q.shape[-1] >= 896 or max(q.shape[0], q.shape[3 - seq_dim], k.shape[3 - seq_dim]) >= 1000:
        return f"npu_rotary_mul's limits (D < 896, B and heads < 1000): q {tuple(q.shape)}, k {tuple(k.shape)}"
    if q.device.type != "npu":
        return f"torch_npu runs on npu tensors, not {q.device.type}"
    return None


def rope(q, k, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last):
    """npu_rotary_mul per tensor, cos/sin broadcast over the heads dim (layout limits: see seed-contracts.md)."""
    def table(t):
        return (t if t.dim() == 3 else t.unsqueeze(0)).unsqueeze(3 - seq_dim)

    mode = "interleave" if interleaved else "half"
    return tuple(torch_npu.npu_rotary_mul(x, table(cos), table(sin), rotary_mode=mode).contiguous() for x in (q, k))


TABLE.implement("rope", rope, supports=_rope_reason)


def _mask4(mask):
    """A mask broadcastable to [B, Hq, Sq, Skv] as 4-D."""
    return mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))


def _attention_reason(q, k, v, mask, q_pos, scale, causal, window, softcap, sinks):
    if softcap or sinks is not None:
        return "a softcap or sinks (no torch_npu attention op here takes them)"
    if mask is not None and mask.dtype != torch.bool:
        return "an additive mask (FIA's masks are bool; its pse_shift is not mapped)"
    if mask is not None and (mask.dim() > 4 or _mask4(mask).shape[1] != 1):
        return f"a per-head mask {tuple(mask.shape)} (FIA's masks are shared by the heads)"
    if q.shape[1] % k.shape[1] or q.shape[1] // k.shape[1] > 64:
        return f"{q.shape[1]} query heads over {k.shape[1]} kv heads (FIA: a divisor, a ratio up to 64)"
    if q.dtype not in (torch.float16, torch.bfloat16):
        return f"npu_fused_infer_attention_score takes fp16/bf16, not {q.dtype}"
    if q.device.type != "npu":
        return f"torch_npu runs on npu tensors, not {q.device.type}"
    return None


@functools.lru_cache(maxsize=None)
def _compressed_causal(device: torch.device) -> torch.Tensor:
    """sparse_mode 3's mask: [2048, 2048], True above the diagonal (masked out)."""
    return torch.triu(torch.ones(2048, 2048, dtype=torch.bool, device=device), 1)


def attention(q, k, v, mask, q_pos, scale, causal, window, softcap, sinks):
    batch, heads, s_q, _ = q.shape
    keep, fia_mask = None, {}
    # sparse_mode 3 only where every query row keeps a key: with more queries than keys the first rows have none,
    # and the explicit path below gives them the op's 0 / -inf.
    explicit = mask is not None or q_pos is not None or window or (causal and s_q > k.shape[2])
    structure = reference.structural_mask(q, k, q_pos, causal, window) if explicit else None  # [Sq, Skv] or None
    if mask is not None or structure is not None:
        keep = structure if mask is None else _mask4(mask) if structure is None else _mask4(mask) & structure
        keep = _mask4(keep).expand(batch, 1, s_q, k.shape[2])
        fia_mask = dict(atten_mask=(~keep).contiguous(), sparse_mode=0)  # Ascend: True = masked out
    elif causal:
        fia_mask = dict(atten_mask=_compressed_causal(q.device), sparse_mode=3)
    out, lse = torch_npu.npu_fused_infer_attention_score(
        q, k, v, num_heads=heads, num_key_value_heads=k.shape[1], input_layout="BNSD", scale=scale,
        softmax_lse_flag=True, **fia_mask)
    lse = lse.reshape(batch, heads, s_q).float()
    if keep is not None:  # rows with no key: the op's 0 and -inf (on the device: no host sync)
        any_key = keep.any(-1)  # [B, 1, Sq]
        out = torch.where(any_key[..., None], out, torch.zeros((), dtype=out.dtype, device=out.device))
        lse = torch.where(any_key, lse, torch.full((), float("-inf"), device=lse.device))
    return out.contiguous(), lse


TABLE.implement("attention", attention, supports=_attention_reason)


def _npu_tensors(logits, *rest):
    return None if logits.device.type == "npu" else f"torch_npu runs on npu tensors, not {logits.device.type}"


# The losses run the torch reference (fp32 per chunk of rows, dlogits in the logits' dtype): no torch_npu op is
# mapped to it yet. Registered so that the report names torch_npu, not a fallback.
for _op, _inputs_of in (("cross_entropy", lambda logits, *rest: logits),
                        ("cross_entropy_backward", lambda grad_loss, grad_lse, logits, *rest: logits),
                        ("linear_cross_entropy", lambda hidden, *rest: hidden),
                        ("linear_cross_entropy_backward", lambda grad_loss, grad_lse, hidden, *rest: hidden)):
    TABLE.implement(_op, reference.TABLE[_op].fn, supports=lambda *args, _of=_inputs_of: _npu_tensors(_of(*args)),
                    traceable=reference.TABLE[_op].traceable)
