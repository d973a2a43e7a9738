"""Attention as a Mojo op: `mojo::attention(q, k, v, ...)` -> (out, lse), GQA read natively (no repeat_kv copy).

    q [B, Hq, Sq, D], k / v [B, Hkv, Skv, D], Hq % Hkv == 0: q head h reads kv head h // (Hq // Hkv)
    s = (q . k) * scale                       fp32
    s = softcap * tanh(s / softcap)           softcap > 0 (Gemma2)
    s = s + mask   / s[~mask] = -inf          mask: additive float or bool (True = attend), broadcastable to
                                              [B, Hq, Sq, Skv]
    structural masking: key j (position j) is allowed for query row i iff j <= q_pos[i] (causal) and
                        j > q_pos[i] - window (window > 0); q_pos None = bottom-right: q_pos[i] = Skv - Sq + i
    p = softmax over the allowed keys and, per head, one sink logit (gpt-oss) that takes probability but no value
    out = p @ v (q's dtype); lse = log-sum-exp of the row (fp32), what the backward needs

A row with no allowed key and no sink gives out = 0, lse = -inf. The mask analysis (patterns/mask_analysis.py) gives
the kernel the structure (causal, window) instead of an S x S tensor wherever it proves the graph's mask is exactly
that; otherwise the tensor is passed.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .. import lowering


def _check(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], target: str) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"mojo attention: q, k, v must be [B, H, S, D], got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if k.shape != v.shape[:-1] + k.shape[-1:] or q.shape[-1] != k.shape[-1] or q.shape[0] != k.shape[0] \
            or q.shape[1] % k.shape[1]:
        raise ValueError(f"mojo attention: q {tuple(q.shape)} and k/v {tuple(k.shape)}/{tuple(v.shape)} do not "
                         f"form a (grouped-query) attention")
    full = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    if mask is not None and (mask.dim() > 4 or any(m not in (1, f) for m, f in zip(reversed(mask.shape),
                                                                                   reversed(full)))):
        raise ValueError(f"mojo attention: mask {tuple(mask.shape)} does not broadcast to [B, Hq, Sq, Skv] = {full}")
    lowering.check_target_name(target)


@torch.library.custom_op("mojo::attention", mutates_args=())
def attention(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], q_pos: Optional[Tensor], scale: float,
              causal: bool = False, window: int = 0, softcap: float = 0.0, sinks: Optional[Tensor] = None,
              target: str = "torch") -> tuple[Tensor, Tensor]:
    """(out [B, Hq, Sq, Dv] in q's dtype, lse [B, Hq, Sq] fp32)."""
    _check(q, k, v, mask, target)
    return lowering.call("attention", target, q, k, v, mask, q_pos, scale, causal, window, softcap, sinks)


@attention.register_fake
def _(q, k, v, mask, q_pos, scale, causal=False, window=0, softcap=0.0, sinks=None, target="torch"):
    b, h, s, _ = q.shape
    return q.new_empty((b, h, s, v.shape[-1])), q.new_empty((b, h, s), dtype=torch.float32)


@torch.library.custom_op("mojo::attention_backward", mutates_args=())
def attention_backward(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                       mask: Optional[Tensor], q_pos: Optional[Tensor], scale: float, causal: bool, window: int,
                       softcap: float, sinks: Optional[Tensor], target: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(grad_q, grad_k, grad_v, grad_sinks -- empty without sinks)."""
    _check(q, k, v, mask, target)
    return lowering.call("attention_backward", target, grad_out, q, k, v, out, lse, mask, q_pos, scale, causal,
                         window, softcap, sinks)


@attention_backward.register_fake
def _(grad_out, q, k, v, out, lse, mask, q_pos, scale, causal, window, softcap, sinks, target):
    grad_sinks = sinks.new_empty(sinks.shape) if sinks is not None else q.new_empty((0,))
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), grad_sinks


def _setup(ctx, inputs, output):
    q, k, v, mask, q_pos, scale, causal, window, softcap, sinks, target = inputs
    if mask is not None and mask.requires_grad:  # the backward gives the mask none: refuse a silent zero
        raise RuntimeError("mojo attention: the mask takes no gradient here; detach it, or leave this site unfused")
    ctx.save_for_backward(q, k, v, output[0], output[1], mask, q_pos, sinks)
    ctx.params = (scale, causal, window, softcap, target)


def _backward(ctx, grad_out, _grad_lse):
    q, k, v, out, lse, mask, q_pos, sinks = ctx.saved_tensors
    scale, causal, window, softcap, target = ctx.params
    dq, dk, dv, dsinks = attention_backward(grad_out, q, k, v, out, lse, mask, q_pos, scale, causal, window, softcap,
                                            sinks, target)
    return dq, dk, dv, None, None, None, None, None, None, (dsinks if sinks is not None else None), None


attention.register_autograd(_backward, setup_context=_setup)


def _register_autocast(op_def, device_type: str) -> None:
    """Under torch.autocast the spellings this op replaces compute in the autocast dtype: SDPA and matmul are on
    autocast's lower-precision list, so q, k and v are cast to that dtype first and the output has it. Do the same
    (with the dtype of the autocast region in force, which torch.library.register_autocast cannot: it takes one
    fixed dtype). The mask and sinks keep their dtype (the eager spelling adds an fp32 mask to the scores)."""
    if not torch._C._is_autocast_available(device_type):
        return
    key = "Autocast" + torch._C._dispatch_key_for_device(device_type)
    keyset = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key))

    def kernel(_keyset, q, k, v, *rest):
        dtype = torch.get_autocast_dtype(device_type)

        def cast(t):
            return t.to(dtype) if t.is_floating_point() and t.device.type == device_type else t

        with torch._C._ExcludeDispatchKeyGuard(keyset):
            return op_def._opoverload(cast(q), cast(k), cast(v), *rest)

    op_def._lib.impl(op_def._name, kernel, key, with_keyset=True)


for _device_type in ("cuda", "cpu"):
    _register_autocast(attention, _device_type)

for _op, _name in ((attention, "attention"), (attention_backward, "attention_backward")):
    lowering.inline_in_inner_compiler(_op, _name)
