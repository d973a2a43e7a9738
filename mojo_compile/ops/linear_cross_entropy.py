"""The LM head fused with the causal-LM loss as a Mojo op: `mojo::linear_cross_entropy(hidden, weight, labels,
ignore_index, reduction, hidden_grad, weight_grad, softcap, logit_scale, logit_divisor, label_smoothing)` -> (loss,
lse, dhidden, dweight), loss what `F.cross_entropy(F.linear(hidden, weight).float(), labels, ignore_index=...,
reduction=..., label_smoothing=...)` computes, without ever materialising the [N, V] logits (forward or backward).

    hidden [N, H]  bf16 / fp16 / fp32
    weight [V, H]  hidden's dtype (F.linear takes no mixed dtypes)
    labels [N]     int64; a row whose label is ignore_index is ignored
    logits         hidden @ weight.T as the spelling computes it: the GEMM in hidden's dtype (fp32 accumulation,
                   rounded to that dtype -- bf16 logits for bf16), then in that dtype, each op rounding as eager's:
                   `* logit_scale` where it is not 1 (Cohere), `/ logit_divisor` where it is not 1 (Granite's
                   logits_scaling), Gemma2's final softcap `/ softcap`, `tanh`, `* softcap` where softcap > 0;
                   then `.float()`; never stored whole
    loss, lse      as mojo::cross_entropy (ops/cross_entropy.py) on those logits, label smoothing included: fp32,
                   loss a scalar for "mean" / "sum" ("mean" over rows not ignored, NaN when every row is ignored),
                   [N] for "none"; lse [N]

Gradients in the forward (hidden_grad / weight_grad, for "mean" and "sum"): a scalar loss's gradients are its
upstream gradient g times those of g = 1, so the forward, which has each block of logits in hand, also returns
dhidden and dweight for g = 1 (the pattern asks for them where autograd will want them: patterns/
linear_cross_entropy.py). The backward then only scales them by g: three GEMMs in all, as the unfused head, where
recomputing the logits in the backward would cost a fourth. A gradient not asked for comes back as [0, H]. Not
for fp16 (the pattern does not ask): rounded to fp16 before the scaling, the gradients of g = 1 lose what eager's,
scaled first, keep (loss scaling's small dlogits; a sum's overflowing dweight).

Backward otherwise (reduction "none", a gradient of lse, or a gradient the forward did not compute): dlogits =
(softmax - onehot(labels)) * g, per block of rows and of vocabulary, recomputed from the saved hidden and weight;
dhidden [N, H] and dweight [V, H] in their dtypes. Saved between forward and backward: hidden, weight, labels, lse
and the forward's gradients -- nothing of size [N, V]. A label out of [0, V) that is not ignore_index: a NaN row (no
out-of-bounds read, no host sync), as mojo::cross_entropy.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .. import lowering
from .cross_entropy import LOGIT_DTYPES, REDUCTIONS, check_label_smoothing, check_labels


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and abs(x) < float("inf")


def _check(hidden: Tensor, weight: Tensor, labels: Tensor, reduction: str, softcap: float, logit_scale: float,
           logit_divisor: float, label_smoothing: float, target: str) -> None:
    check_label_smoothing("linear_cross_entropy", label_smoothing)
    if not (_finite(softcap) and softcap >= 0):
        raise ValueError(f"mojo linear_cross_entropy: softcap must be a finite float >= 0 (0: none), got {softcap!r}")
    if not _finite(logit_scale):
        raise ValueError(f"mojo linear_cross_entropy: logit_scale must be a finite float (1: none), got "
                         f"{logit_scale!r}")
    if not (_finite(logit_divisor) and logit_divisor != 0):
        raise ValueError(f"mojo linear_cross_entropy: logit_divisor must be a finite float other than 0 (1: none), "
                         f"got {logit_divisor!r}")
    if not isinstance(reduction, str) or reduction not in REDUCTIONS:
        raise ValueError(f"mojo linear_cross_entropy: reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if hidden.dim() != 2 or hidden.dtype not in LOGIT_DTYPES:
        raise ValueError(f"mojo linear_cross_entropy: hidden must be [N, H] bf16 / fp16 / fp32, got {hidden.dtype} "
                         f"{tuple(hidden.shape)}")
    if weight.dim() != 2 or weight.dtype != hidden.dtype or weight.shape[1] != hidden.shape[1]:
        raise ValueError(f"mojo linear_cross_entropy: weight must be [V, H] = [V, {hidden.shape[1]}] "
                         f"{hidden.dtype}, got {weight.dtype} {tuple(weight.shape)}")
    if weight.shape[0] == 0:
        raise ValueError("mojo linear_cross_entropy: weight has no rows (V = 0)")
    check_labels("linear_cross_entropy", labels, hidden.shape[0])
    lowering.check_target_name(target)


def _loss_shape(hidden: Tensor, reduction: str) -> list:
    return [hidden.shape[0]] if reduction == "none" else []


# ---------------------------------------------------------------------------------------------------------- forward
def _grad_shapes(hidden: Tensor, weight: Tensor, hidden_grad: bool, weight_grad: bool) -> tuple[list, list]:
    return ([*hidden.shape] if hidden_grad else [0, hidden.shape[1]]), \
        ([*weight.shape] if weight_grad else [0, weight.shape[1]])


@torch.library.custom_op("mojo::linear_cross_entropy", mutates_args=())
def linear_cross_entropy(hidden: Tensor, weight: Tensor, labels: Tensor, ignore_index: int = -100,
                         reduction: str = "mean", hidden_grad: bool = False, weight_grad: bool = False,
                         softcap: float = 0.0, logit_scale: float = 1.0, logit_divisor: float = 1.0,
                         label_smoothing: float = 0.0, target: str = "torch") -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(loss, lse, dhidden, dweight): loss and lse fp32 (loss a scalar for "mean" / "sum", [N] for "none"; lse
    [N]); dhidden / dweight the gradients of the loss for an upstream gradient of 1, in hidden's / weight's dtype,
    where hidden_grad / weight_grad ask for them ("mean" / "sum" only), else [0, H]."""
    _check(hidden, weight, labels, reduction, softcap, logit_scale, logit_divisor, label_smoothing, target)
    if (hidden_grad or weight_grad) and reduction == "none":
        raise ValueError("mojo linear_cross_entropy: gradients in the forward need a scalar loss (mean / sum)")
    return lowering.call("linear_cross_entropy", target, hidden, weight, labels, ignore_index, reduction,
                         hidden_grad, weight_grad, float(softcap), float(logit_scale), float(logit_divisor),
                         float(label_smoothing))


@linear_cross_entropy.register_fake
def _(hidden, weight, labels, ignore_index=-100, reduction="mean", hidden_grad=False, weight_grad=False,
      softcap=0.0, logit_scale=1.0, logit_divisor=1.0, label_smoothing=0.0, target="torch"):
    dh_shape, dw_shape = _grad_shapes(hidden, weight, hidden_grad, weight_grad)
    return (hidden.new_empty(_loss_shape(hidden, reduction), dtype=torch.float32),
            hidden.new_empty([hidden.shape[0]], dtype=torch.float32),
            hidden.new_empty(dh_shape), weight.new_empty(dw_shape))


# --------------------------------------------------------------------------------------------------------- backward
@torch.library.custom_op("mojo::linear_cross_entropy_backward", mutates_args=())
def linear_cross_entropy_backward(grad_loss: Tensor, grad_lse: Optional[Tensor], hidden: Tensor, weight: Tensor,
                                  labels: Tensor, lse: Tensor, ignore_index: int, reduction: str, hidden_grad: bool,
                                  weight_grad: bool, softcap: float, logit_scale: float, logit_divisor: float,
                                  label_smoothing: float, target: str) -> tuple[Tensor, Tensor]:
    """(dhidden [N, H], dweight [V, H]) in their dtypes; one not asked for (hidden_grad / weight_grad False) is
    returned as zeros of size 0 along its first dim -- never computed."""
    _check(hidden, weight, labels, reduction, softcap, logit_scale, logit_divisor, label_smoothing, target)
    return lowering.call("linear_cross_entropy_backward", target, grad_loss, grad_lse, hidden, weight, labels, lse,
                         ignore_index, reduction, hidden_grad, weight_grad, float(softcap), float(logit_scale),
                         float(logit_divisor), float(label_smoothing))


@linear_cross_entropy_backward.register_fake
def _(grad_loss, grad_lse, hidden, weight, labels, lse, ignore_index, reduction, hidden_grad, weight_grad, softcap,
      logit_scale, logit_divisor, label_smoothing, target):
    dh_shape, dw_shape = _grad_shapes(hidden, weight, hidden_grad, weight_grad)
    return hidden.new_empty(dh_shape), weight.new_empty(dw_shape)


# --------------------------------------------------------------------------------------------------------- autograd
def _setup(ctx, inputs, output):
    hidden, weight, labels, ignore_index, reduction, hidden_grad, weight_grad, softcap, logit_scale, logit_divisor, \
        label_smoothing, target = inputs
    _, lse, dh_unit, dw_unit = output
    ctx.save_for_backward(hidden, weight, labels, lse, dh_unit, dw_unit)  # nothing [N, V]
    ctx.mark_non_differentiable(dh_unit, dw_unit)  # what the backward scales, not results to differentiate
    ctx.set_materialize_grads(False)  # an output nobody differentiates: None, not zeros (lse: the scaled path)
    ctx.params = (ignore_index, reduction)
    ctx.logit_ops = (softcap, logit_scale, logit_divisor)  # what turns the GEMM's output into the logits
    ctx.label_smoothing = label_smoothing
    ctx.unit_grads = (hidden_grad, weight_grad)
    ctx.target = target


def _backward(ctx, grad_loss, grad_lse, _grad_dh_unit, _grad_dw_unit):
    """The forward's gradients scaled by grad_loss where it computed them and lse has no gradient; the rest
    recomputed blockwise. Under create_graph=True (grad mode on in the backward: eager autograd; AOTAutograd traces
    backwards without it), gradients that are differentiable themselves: see _differentiable_backward."""
    if torch.is_grad_enabled():
        return _differentiable_backward(ctx, grad_loss, grad_lse)
    hidden, weight, labels, lse, dh_unit, dw_unit = ctx.saved_tensors
    want_h, want_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    if grad_loss is None:
        grad_loss = lse.new_zeros(_loss_shape(hidden, ctx.params[1]))
    scaled = grad_lse is None
    have_h, have_w = scaled and ctx.unit_grads[0], scaled and ctx.unit_grads[1]
    dh = dh_unit * grad_loss if want_h and have_h else None
    dw = dw_unit * grad_loss if want_w and have_w else None
    rest_h, rest_w = want_h and not have_h, want_w and not have_w
    if rest_h or rest_w:
        rh, rw = linear_cross_entropy_backward(grad_loss, grad_lse, hidden, weight, labels, lse, *ctx.params,
                                               rest_h, rest_w, *ctx.logit_ops, ctx.label_smoothing, ctx.target)
        dh, dw = (rh if rest_h else dh), (rw if rest_w else dw)
    return dh, dw, *[None] * 10


def _differentiable_backward(ctx, grad_loss, grad_lse):
    """The gradients through the torch reference's blockwise loss (lowering/reference.py), differentiated by
    autograd with create_graph: a second-order gradient through the loss is eager's, at the reference's speed and
    memory (autograd keeps every block). The scaled forward gradients would drop the terms through them."""
    hidden, weight, labels = ctx.saved_tensors[:3]
    wanted = [t for t, want in zip((hidden, weight), ctx.needs_input_grad[:2]) if want]
    loss, lse = lowering.reference.linear_cross_entropy_loss(hidden, weight, labels, *ctx.params, *ctx.logit_ops,
                                                             ctx.label_smoothing)
    pairs = [(o, g) for o, g in ((loss, grad_loss), (lse, grad_lse)) if g is not None]
    if not pairs or not wanted:
        return None, None, *[None] * 10
    outs, grads = zip(*pairs)
    found = iter(torch.autograd.grad(outs, wanted, grads, create_graph=True, allow_unused=True))
    dh, dw = [next(found) if want else None for want in ctx.needs_input_grad[:2]]
    return dh, dw, *[None] * 10


linear_cross_entropy.register_autograd(_backward, setup_context=_setup)

for _op, _name in ((linear_cross_entropy, "linear_cross_entropy"),
                   (linear_cross_entropy_backward, "linear_cross_entropy_backward")):
    lowering.inline_in_inner_compiler(_op, _name)
