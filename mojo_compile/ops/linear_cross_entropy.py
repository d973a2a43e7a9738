"""The LM head fused with the causal-LM loss as a Mojo op: `mojo::linear_cross_entropy(hidden, weight, labels,
ignore_index, reduction)` -> (loss, lse), what `F.cross_entropy(F.linear(hidden, weight).float(), labels,
ignore_index=..., reduction=...)` computes, without ever materialising the [N, V] logits (forward or backward).

    hidden [N, H]  bf16 / fp16 / fp32
    weight [V, H]  hidden's dtype (F.linear takes no mixed dtypes)
    labels [N]     int64; a row whose label is ignore_index is ignored
    logits         hidden @ weight.T as the spelling computes it: the GEMM in hidden's dtype (fp32 accumulation,
                   rounded to that dtype -- bf16 logits for bf16), then `.float()`; never stored whole
    loss, lse      as mojo::cross_entropy (ops/cross_entropy.py) on those logits: fp32, loss a scalar for "mean" /
                   "sum" ("mean" over rows not ignored, NaN when every row is ignored), [N] for "none"; lse [N]

Backward: dlogits = (softmax - onehot(labels)) * g, per block of rows and of vocabulary, recomputed from the saved
hidden and weight; dhidden [N, H] and dweight [V, H] in their dtypes. Saved between forward and backward: hidden,
weight, labels and lse -- nothing of size [N, V]. A label out of [0, V) that is not ignore_index: a NaN row (no
out-of-bounds read, no host sync), as mojo::cross_entropy.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .. import lowering
from .cross_entropy import LOGIT_DTYPES, REDUCTIONS


def _check(hidden: Tensor, weight: Tensor, labels: Tensor, reduction: str, target: str) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"mojo linear_cross_entropy: reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if hidden.dim() != 2 or hidden.dtype not in LOGIT_DTYPES:
        raise ValueError(f"mojo linear_cross_entropy: hidden must be [N, H] bf16 / fp16 / fp32, got {hidden.dtype} "
                         f"{tuple(hidden.shape)}")
    if weight.dim() != 2 or weight.dtype != hidden.dtype or weight.shape[1] != hidden.shape[1]:
        raise ValueError(f"mojo linear_cross_entropy: weight must be [V, H] = [V, {hidden.shape[1]}] "
                         f"{hidden.dtype}, got {weight.dtype} {tuple(weight.shape)}")
    if weight.shape[0] == 0:
        raise ValueError("mojo linear_cross_entropy: weight has no rows (V = 0)")
    if labels.dtype != torch.int64 or labels.dim() != 1 or labels.shape[0] != hidden.shape[0]:
        raise ValueError(f"mojo linear_cross_entropy: labels must be int64 [N] = [{hidden.shape[0]}], got "
                         f"{labels.dtype} {tuple(labels.shape)}")
    lowering.check_target_name(target)


def _loss_shape(hidden: Tensor, reduction: str) -> list:
    return [hidden.shape[0]] if reduction == "none" else []


# ---------------------------------------------------------------------------------------------------------- forward
@torch.library.custom_op("mojo::linear_cross_entropy", mutates_args=())
def linear_cross_entropy(hidden: Tensor, weight: Tensor, labels: Tensor, ignore_index: int = -100,
                         reduction: str = "mean", target: str = "torch") -> tuple[Tensor, Tensor]:
    """(loss, lse), both fp32: loss a scalar for "mean" / "sum", [N] for "none"; lse [N]."""
    _check(hidden, weight, labels, reduction, target)
    return lowering.call("linear_cross_entropy", target, hidden, weight, labels, ignore_index, reduction)


@linear_cross_entropy.register_fake
def _(hidden, weight, labels, ignore_index=-100, reduction="mean", target="torch"):
    return (hidden.new_empty(_loss_shape(hidden, reduction), dtype=torch.float32),
            hidden.new_empty([hidden.shape[0]], dtype=torch.float32))


# --------------------------------------------------------------------------------------------------------- backward
@torch.library.custom_op("mojo::linear_cross_entropy_backward", mutates_args=())
def linear_cross_entropy_backward(grad_loss: Tensor, grad_lse: Optional[Tensor], hidden: Tensor, weight: Tensor,
                                  labels: Tensor, lse: Tensor, ignore_index: int, reduction: str, hidden_grad: bool,
                                  weight_grad: bool, target: str) -> tuple[Tensor, Tensor]:
    """(dhidden [N, H], dweight [V, H]) in their dtypes; one not asked for (hidden_grad / weight_grad False) is
    returned as zeros of size 0 along its first dim -- never computed."""
    _check(hidden, weight, labels, reduction, target)
    return lowering.call("linear_cross_entropy_backward", target, grad_loss, grad_lse, hidden, weight, labels, lse,
                         ignore_index, reduction, hidden_grad, weight_grad)


@linear_cross_entropy_backward.register_fake
def _(grad_loss, grad_lse, hidden, weight, labels, lse, ignore_index, reduction, hidden_grad, weight_grad, target):
    return (hidden.new_empty(hidden.shape if hidden_grad else (0, hidden.shape[1])),
            weight.new_empty(weight.shape if weight_grad else (0, weight.shape[1])))


# --------------------------------------------------------------------------------------------------------- autograd
def _setup(ctx, inputs, output):
    hidden, weight, labels, ignore_index, reduction, target = inputs
    ctx.save_for_backward(hidden, weight, labels, output[1])  # lse: [N]; nothing [N, V]
    ctx.params = (ignore_index, reduction)
    ctx.target = target


def _backward(ctx, grad_loss, grad_lse):
    hidden, weight, labels, lse = ctx.saved_tensors
    if grad_loss is None:
        grad_loss = lse.new_zeros(_loss_shape(hidden, ctx.params[1]))
    want_h, want_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    dh, dw = linear_cross_entropy_backward(grad_loss, grad_lse, hidden, weight, labels, lse, *ctx.params,
                                           want_h, want_w, ctx.target)
    return (dh if want_h else None), (dw if want_w else None), None, None, None, None


linear_cross_entropy.register_autograd(_backward, setup_context=_setup)

for _op, _name in ((linear_cross_entropy, "linear_cross_entropy"),
                   (linear_cross_entropy_backward, "linear_cross_entropy_backward")):
    lowering.inline_in_inner_compiler(_op, _name)
