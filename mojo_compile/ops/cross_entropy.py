"""The causal-LM loss on materialised logits as a Mojo op: `mojo::cross_entropy(logits, labels, ignore_index,
reduction, label_smoothing)` -> (loss, lse), what `F.cross_entropy(logits.float(), labels, ignore_index=...,
reduction=..., label_smoothing=...)` computes, without the fp32 copy of the logits, its log-softmax or an fp32
gradient.

    logits [N, V]  bf16 / fp16 / fp32 (any of them: every value is computed in fp32)
    labels [N]     int64; a row whose label is ignore_index is ignored
    lse[i]  = log(sum_j exp(logits[i, j]))                                  fp32 [N], every row
    row[i]  = lse[i] - logits[i, labels[i]], 0 on an ignored row            fp32
              with label smoothing eps in [0, 1], torch's: (1 - eps) * row[i] + eps * (lse[i] - mean_j logits[i, j])
    loss    = sum(row) / (number of rows not ignored)   reduction "mean"    (0 / 0 = NaN: every row ignored, as torch)
            = sum(row)                                  reduction "sum"
            = row                                       reduction "none"    [N]

A label outside [0, V) that is not ignore_index: torch raises (a device assert on CUDA). The op never reads out of
bounds and never syncs with the host to check; such a row's loss is NaN (it counts in the mean's denominator, so
the loss is NaN) and its gradient row is NaN: the error shows in the loss instead of silently dropping the token.

Backward: dlogits = (softmax(logits) - onehot(labels)) * g (the target (1 - eps) * onehot + eps / V with label
smoothing), with g[i] = grad_loss (/ count for "mean";
grad_loss[i] for "none"), 0 on ignored rows, written in the logits' dtype -- the only [N, V] tensor of the
backward. Saved: the logits (alive anyway: the model returns them), labels and lse; the count is recomputed from the
labels ([N], cheap). lse is differentiable too (d lse / d logits = softmax), for callers of the op itself; the
patterns use only the loss.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .. import lowering

REDUCTIONS = ("mean", "sum", "none")
LOGIT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def check_label_smoothing(op: str, label_smoothing) -> None:
    """A float in [0, 1], as torch requires (shared with ops/linear_cross_entropy.py)."""
    if not (isinstance(label_smoothing, (int, float)) and not isinstance(label_smoothing, bool)
            and 0 <= label_smoothing <= 1):
        raise ValueError(f"mojo {op}: label_smoothing must be a float in [0, 1], got {label_smoothing!r}")


def _check(logits: Tensor, labels: Tensor, reduction: str, label_smoothing: float, target: str) -> None:
    check_label_smoothing("cross_entropy", label_smoothing)
    if reduction not in REDUCTIONS:
        raise ValueError(f"mojo cross_entropy: reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if logits.dim() != 2 or logits.dtype not in LOGIT_DTYPES:
        raise ValueError(f"mojo cross_entropy: logits must be [N, V] bf16 / fp16 / fp32, got {logits.dtype} "
                         f"{tuple(logits.shape)}")
    if logits.shape[1] == 0:
        raise ValueError("mojo cross_entropy: logits have no classes (V = 0)")
    check_labels("cross_entropy", labels, logits.shape[0])
    lowering.check_target_name(target)


def check_labels(op: str, labels: Tensor, rows) -> None:
    """Class indices, one per row: int64 [rows] (shared with ops/linear_cross_entropy.py)."""
    if labels.dtype != torch.int64 or labels.dim() != 1 or labels.shape[0] != rows:
        raise ValueError(f"mojo {op}: labels must be int64 [N] = [{rows}], got {labels.dtype} "
                         f"{tuple(labels.shape)}")


def _loss_shape(logits: Tensor, reduction: str) -> list:
    return [logits.shape[0]] if reduction == "none" else []


# ---------------------------------------------------------------------------------------------------------- forward
@torch.library.custom_op("mojo::cross_entropy", mutates_args=())
def cross_entropy(logits: Tensor, labels: Tensor, ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0, target: str = "torch") -> tuple[Tensor, Tensor]:
    """(loss, lse), both fp32: loss a scalar for "mean" / "sum", [N] for "none"; lse [N]."""
    _check(logits, labels, reduction, label_smoothing, target)
    return lowering.call("cross_entropy", target, logits, labels, ignore_index, reduction, float(label_smoothing))


@cross_entropy.register_fake
def _(logits, labels, ignore_index=-100, reduction="mean", label_smoothing=0.0, target="torch"):
    return (logits.new_empty(_loss_shape(logits, reduction), dtype=torch.float32),
            logits.new_empty([logits.shape[0]], dtype=torch.float32))


# --------------------------------------------------------------------------------------------------------- backward
@torch.library.custom_op("mojo::cross_entropy_backward", mutates_args=())
def cross_entropy_backward(grad_loss: Tensor, grad_lse: Optional[Tensor], logits: Tensor, labels: Tensor,
                           lse: Tensor, ignore_index: int, reduction: str, label_smoothing: float,
                           target: str) -> Tensor:
    """dlogits [N, V] in the logits' dtype."""
    _check(logits, labels, reduction, label_smoothing, target)
    return lowering.call("cross_entropy_backward", target, grad_loss, grad_lse, logits, labels, lse, ignore_index,
                         reduction, float(label_smoothing))


@cross_entropy_backward.register_fake
def _(grad_loss, grad_lse, logits, labels, lse, ignore_index, reduction, label_smoothing, target):
    return logits.new_empty(logits.shape)


# --------------------------------------------------------------------------------------------------------- autograd
def _setup(ctx, inputs, output):
    logits, labels, ignore_index, reduction, label_smoothing, target = inputs
    ctx.save_for_backward(logits, labels, output[1])
    ctx.params = (ignore_index, reduction, label_smoothing, target)


def _backward(ctx, grad_loss, grad_lse):
    logits, labels, lse = ctx.saved_tensors
    if grad_loss is None:
        grad_loss = lse.new_zeros(_loss_shape(logits, ctx.params[1]))
    return cross_entropy_backward(grad_loss, grad_lse, logits, labels, lse, *ctx.params), *[None] * 5


cross_entropy.register_autograd(_backward, setup_context=_setup)

for _op, _name in ((cross_entropy, "cross_entropy"), (cross_entropy_backward, "cross_entropy_backward")):
    lowering.inline_in_inner_compiler(_op, _name)
