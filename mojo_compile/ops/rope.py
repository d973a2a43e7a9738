"""Rotary position embedding as Mojo ops: `mojo::rope(q, k, cos, sin)` rotates q and k in one launch, and
`mojo::qk_norm_rope` first RMS-normalises each head of q and k (Qwen3, Gemma3) -- one read and one write of q and k.

Layouts: q, k are 4-D, [B, S, H, D] (seq_dim=1) or [B, H, S, D] (seq_dim=2), any strides with a unit last stride;
cos/sin are [B or 1, S, R] or [S, R] (R = rotary_dim <= D). Conventions:
    interleaved=False   NeoX / Llama rotate-half: pairs (i, i + R/2)
    interleaved=True    GPT-J / GLM / Cohere: pairs (2i, 2i + 1)
    rotate_last=False   HF partial rotary: the first R dims rotate, the rest pass through
    rotate_last=True    Mojo Opset: the last R dims rotate
Numerics are eager's `q * cos + rotate_half(q) * sin` in the dtype promote(q, cos) (each product rounded, then the
sum). cos and sin take no gradient (HF computes them from buffers): the patterns check they need none.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .. import lowering
from .rms_norm import _check_params, rms_norm_out_dtype


def _check(q: Tensor, k: Tensor, cos: Tensor, rotary_dim: int, seq_dim: int, target: str) -> None:
    if q.dim() != 4 or k.dim() != 4 or seq_dim not in (1, 2):
        raise ValueError(f"mojo rope: q and k must be 4-D with seq_dim 1 or 2, got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, seq_dim={seq_dim}")
    if not 0 < rotary_dim <= q.shape[-1] or rotary_dim % 2 or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"mojo rope: rotary_dim {rotary_dim} must be even and at most head_dim {q.shape[-1]} "
                         f"(q and k alike)")
    if cos.shape[-1] != rotary_dim:
        raise ValueError(f"mojo rope: cos/sin have {cos.shape[-1]} columns, rotary_dim is {rotary_dim}")
    lowering.check_target_name(target)


def _heads_dim(seq_dim: int) -> int:
    return 3 - seq_dim


# ------------------------------------------------------------------------------------------------------------- rope
@torch.library.custom_op("mojo::rope", mutates_args=())
def rope(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, rotary_dim: int, interleaved: bool = False,
         seq_dim: int = 2, rotate_last: bool = False, target: str = "torch") -> tuple[Tensor, Tensor]:
    """(q rotated, k rotated): new contiguous tensors of q's / k's shape, dtype promote(q, cos)."""
    _check(q, k, cos, rotary_dim, seq_dim, target)
    return lowering.call("rope", target, q, k, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last)


@rope.register_fake
def _(q, k, cos, sin, rotary_dim, interleaved=False, seq_dim=2, rotate_last=False, target="torch"):
    return (q.new_empty(q.shape, dtype=torch.promote_types(q.dtype, cos.dtype)),
            k.new_empty(k.shape, dtype=torch.promote_types(k.dtype, cos.dtype)))


@torch.library.custom_op("mojo::rope_backward", mutates_args=())
def rope_backward(grad_q: Tensor, grad_k: Tensor, cos: Tensor, sin: Tensor, rotary_dim: int, interleaved: bool,
                  seq_dim: int, rotate_last: bool, q_dtype: torch.dtype, k_dtype: torch.dtype,
                  target: str) -> tuple[Tensor, Tensor]:
    """Gradients of q and k (the transposed rotation), in q's and k's dtypes."""
    _check(grad_q, grad_k, cos, rotary_dim, seq_dim, target)
    return lowering.call("rope_backward", target, grad_q, grad_k, cos, sin, rotary_dim, interleaved, seq_dim,
                         rotate_last, q_dtype, k_dtype)


@rope_backward.register_fake
def _(grad_q, grad_k, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last, q_dtype, k_dtype, target):
    return grad_q.new_empty(grad_q.shape, dtype=q_dtype), grad_k.new_empty(grad_k.shape, dtype=k_dtype)


def _no_grad_for(name: str, *tensors) -> None:
    """The op's backward gives these inputs no gradient: refuse rather than return a silently wrong zero."""
    if any(t is not None and t.requires_grad for t in tensors):
        raise RuntimeError(f"mojo {name}: cos and sin take no gradient here (HF computes them from buffers); "
                           "detach them, or leave this site unfused")


def _rope_setup(ctx, inputs, output):
    q, k, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last, target = inputs
    _no_grad_for("rope", cos, sin)
    ctx.save_for_backward(cos, sin)
    ctx.params = (rotary_dim, interleaved, seq_dim, rotate_last, q.dtype, k.dtype, target)


def _rope_bwd(ctx, grad_q, grad_k):
    cos, sin = ctx.saved_tensors
    grad_q, grad_k = rope_backward(grad_q, grad_k, cos, sin, *ctx.params)
    return grad_q, grad_k, None, None, None, None, None, None, None


rope.register_autograd(_rope_bwd, setup_context=_rope_setup)


# ----------------------------------------------------------------------------------------------------- qk-norm + rope
def _check_norm(q, k, q_weight, k_weight, cast, seq_dim, together, target):
    _check_params(cast, target)
    if cast == "rstd":
        raise ValueError("mojo qk_norm_rope: cast must be 'normed' or 'output'")
    for x, w in ((q, q_weight), (k, k_weight)):
        width = x.shape[-1] * (x.shape[_heads_dim(seq_dim)] if together else 1)
        if w.dim() != 1 or w.shape[0] != width:
            raise ValueError(f"mojo qk_norm_rope: weight {tuple(w.shape)} is not one value per normalised column "
                             f"({width})")


def _rstd_shape(x, seq_dim, together):
    batch, seq, heads = x.shape[0], x.shape[seq_dim], x.shape[_heads_dim(seq_dim)]
    return (batch, seq) if together else (batch, seq, heads)


@torch.library.custom_op("mojo::qk_norm_rope", mutates_args=())
def qk_norm_rope(q: Tensor, k: Tensor, q_weight: Tensor, k_weight: Tensor, eps: float, weight_offset: float,
                 cast: str, cos: Tensor, sin: Tensor, rotary_dim: int, interleaved: bool, seq_dim: int,
                 norm_heads_together: bool = False, target: str = "torch") -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """rope(rms_norm(q), rms_norm(k)): (q_out, k_out, q_rstd, k_rstd). Each head is normalised over D (or each
    token over H*D when norm_heads_together, with weights of H*D). Outputs have q's / k's shape and layout."""
    _check(q, k, cos, rotary_dim, seq_dim, target)
    _check_norm(q, k, q_weight, k_weight, cast, seq_dim, norm_heads_together, target)
    return lowering.call("qk_norm_rope", target, q, k, q_weight, k_weight, eps, weight_offset, cast, cos, sin,
                         rotary_dim, interleaved, seq_dim, norm_heads_together)


@qk_norm_rope.register_fake
def _(q, k, q_weight, k_weight, eps, weight_offset, cast, cos, sin, rotary_dim, interleaved, seq_dim,
      norm_heads_together=False, target="torch"):
    outs = []
    for x, w in ((q, q_weight), (k, k_weight)):
        outs.append(x.new_empty(x.shape, dtype=torch.promote_types(rms_norm_out_dtype(x, w, cast), cos.dtype)))
    for x in (q, k):
        outs.append(x.new_empty(_rstd_shape(x, seq_dim, norm_heads_together), dtype=torch.float32))
    return tuple(outs)


@torch.library.custom_op("mojo::qk_norm_rope_backward", mutates_args=())
def qk_norm_rope_backward(grad_q: Tensor, grad_k: Tensor, q: Tensor, k: Tensor, q_weight: Tensor, k_weight: Tensor,
                          q_rstd: Tensor, k_rstd: Tensor, weight_offset: float, cast: str, cos: Tensor, sin: Tensor,
                          rotary_dim: int, interleaved: bool, seq_dim: int, norm_heads_together: bool,
                          target: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(grad_q, grad_k, grad_q_weight, grad_k_weight)."""
    _check(q, k, cos, rotary_dim, seq_dim, target)
    return lowering.call("qk_norm_rope_backward", target, grad_q, grad_k, q, k, q_weight, k_weight, q_rstd, k_rstd,
                         weight_offset, cast, cos, sin, rotary_dim, interleaved, seq_dim, norm_heads_together)


@qk_norm_rope_backward.register_fake
def _(grad_q, grad_k, q, k, q_weight, k_weight, q_rstd, k_rstd, weight_offset, cast, cos, sin, rotary_dim,
      interleaved, seq_dim, norm_heads_together, target):
    return q.new_empty(q.shape), k.new_empty(k.shape), q_weight.new_empty(q_weight.shape), \
        k_weight.new_empty(k_weight.shape)


def _qk_setup(ctx, inputs, output):
    (q, k, q_weight, k_weight, _eps, weight_offset, cast, cos, sin, rotary_dim, interleaved, seq_dim, together,
     target) = inputs
    _no_grad_for("qk_norm_rope", cos, sin)
    ctx.save_for_backward(q, k, q_weight, k_weight, output[2], output[3], cos, sin)
    ctx.params = (weight_offset, cast, rotary_dim, interleaved, seq_dim, together, target)


def _qk_bwd(ctx, grad_q, grad_k, _grad_q_rstd, _grad_k_rstd):
    q, k, q_weight, k_weight, q_rstd, k_rstd, cos, sin = ctx.saved_tensors
    weight_offset, cast, rotary_dim, interleaved, seq_dim, together, target = ctx.params
    grads = qk_norm_rope_backward(grad_q, grad_k, q, k, q_weight, k_weight, q_rstd, k_rstd, weight_offset, cast,
                                  cos, sin, rotary_dim, interleaved, seq_dim, together, target)
    return (*grads, *([None] * 10))


qk_norm_rope.register_autograd(_qk_bwd, setup_context=_qk_setup)

for _op, _name in ((rope, "rope"), (rope_backward, "rope_backward"), (qk_norm_rope, "qk_norm_rope"),
                   (qk_norm_rope_backward, "qk_norm_rope_backward")):
    lowering.inline_in_inner_compiler(_op, _name)
