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
smoothing), with g[i] = grad_loss (/ count for "mean"; grad_loss[i] for "none"), 0 on ignored rows, written in the
logits' dtype -- the only [N, V] tensor of the backward. A second-order gradient (create_graph=True): autograd
through the torch reference's loss. Saved: the logits (alive anyway: the model returns them), labels and lse; the
count is recomputed from the labels ([N], cheap). lse is differentiable too (d lse / d logits = softmax), for
callers of the op itself; the patterns use only the loss.

Implementations, registered below the ops (docs/adding-a-fusion.md):
  torch      fp32 per chunk of rows (lowering/reference.py's row math, which the linear cross-entropy shares);
             dlogits rounded once to the logits' dtype.
  ttx        kernels/cross_entropy.py: per-row losses and lse (and dlogits), reduced over rows by torch
             (deterministic: no atomics).
  torch_npu  the torch reference, on npu tensors: no torch_npu op is mapped to the loss yet. Registered so that
             the report names torch_npu, not a fallback.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .. import lowering, sharding
from ..kernels.common import FLOAT_DTYPES, interpreting, ttx_device_reason
from ..lowering.reference import (cross_entropy_reduce, cross_entropy_row_grads, cross_entropy_rows,
                                  cross_entropy_smoothed, lse_as_log_softmax, row_chunks)

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
    # an output nobody differentiates gets None, not zeros: no tensor to allocate, and none of another kind than
    # the inputs (a DTensor's unused lse would get plain zeros)
    ctx.set_materialize_grads(False)


def _backward(ctx, grad_loss, grad_lse):
    if torch.is_grad_enabled():  # create_graph=True (eager autograd; AOTAutograd traces backwards without it)
        return _differentiable_backward(ctx, grad_loss, grad_lse)
    logits, labels, lse = ctx.saved_tensors
    if grad_loss is None:
        grad_loss = lse.new_zeros(_loss_shape(logits, ctx.params[1]))
    return cross_entropy_backward(grad_loss, grad_lse, logits, labels, lse, *ctx.params), *[None] * 5


def _differentiable_backward(ctx, grad_loss, grad_lse):
    """dlogits that are differentiable themselves, for a second-order gradient (torch.autograd.grad(...,
    create_graph=True), then a backward through it): autograd through the torch reference's loss (torch ops, fp32),
    as eager differentiates its own. mojo::cross_entropy_backward has no autograd formula: without this, eager's
    double backward ran where the compiled one raised."""
    logits, labels, _ = ctx.saved_tensors
    ignore_index, reduction, label_smoothing, _ = ctx.params
    loss, lse = reference(logits, labels, ignore_index, reduction, label_smoothing)
    pairs = [(o, g) for o, g in ((loss, grad_loss), (lse, grad_lse)) if g is not None]
    if not pairs or not ctx.needs_input_grad[0]:
        return None, *[None] * 5
    outs, grads = zip(*pairs)
    (dx,) = torch.autograd.grad(outs, (logits,), grads, create_graph=True, allow_unused=True)
    return dx, *[None] * 5


cross_entropy.register_autograd(_backward, setup_context=_setup)

for _op, _name in ((cross_entropy, "cross_entropy"), (cross_entropy_backward, "cross_entropy_backward")):
    lowering.inline_in_inner_compiler(_op, _name)


# ------------------------------------------------------------------------------------------------ target: torch
def reference(logits, labels, ignore_index, reduction, label_smoothing=0.0):
    """fp32 per chunk of rows: lse by logsumexp (NaN on a row holding +inf, as eager's), the label's logit
    gathered at a clamped index (never out of bounds; a row with a bad label is NaN); with label smoothing, the
    rows' sums too (cross_entropy_smoothed)."""
    v = logits.shape[1]
    chunks = row_chunks(logits)
    lse = lse_as_log_softmax(torch.cat([torch.logsumexp(x.float(), dim=-1) for (x,) in chunks]))
    ignored, bad = cross_entropy_rows(labels, ignore_index, v)
    picked = logits.gather(1, labels.clamp(0, v - 1).unsqueeze(1)).squeeze(1).float()
    row = torch.where(ignored, 0.0, torch.where(bad, float("nan"), lse - picked))
    if label_smoothing:
        row_sum = torch.cat([x.float().sum(-1) for (x,) in chunks])
        row = cross_entropy_smoothed(row, lse, row_sum, labels, ignore_index, v, label_smoothing)
    return cross_entropy_reduce(row, labels, ignore_index, reduction), lse


def reference_backward(grad_loss, grad_lse, logits, labels, lse, ignore_index, reduction, label_smoothing=0.0):
    """(softmax - onehot) * g in fp32 (the smoothed target's with label smoothing: cross_entropy_row_grads), per
    chunk of rows, rounded once to the logits' dtype."""
    v = logits.shape[1]
    a, b, c = cross_entropy_row_grads(grad_loss, grad_lse, labels, ignore_index, reduction, v, label_smoothing)
    cols = torch.arange(v, device=logits.device)
    parts = []
    for x, t, s, a_rows, b_rows, c_rows in row_chunks(logits, labels, lse, a, b, a if c is None else c):
        pa = torch.exp(x.float() - s.unsqueeze(1)) * a_rows.unsqueeze(1)
        d = torch.where(cols == t.unsqueeze(1), pa - b_rows.unsqueeze(1), pa)
        if c is not None:
            d = d - c_rows.unsqueeze(1)
        parts.append(d.to(logits.dtype))
    return torch.cat(parts) if len(parts) > 1 else parts[0].contiguous()


lowering.register_impl("cross_entropy", "torch", reference, **lowering.TRACEABLE)
lowering.register_impl("cross_entropy_backward", "torch", reference_backward, **lowering.TRACEABLE)


# -------------------------------------------------------------------------------------------------- target: ttx
def _kernels():
    """kernels/cross_entropy.py, imported on first use: Triton is needed only where ttx runs."""
    from ..kernels import cross_entropy as kernels
    return kernels


def _ttx_reason(logits, labels, *rows):
    reason = ttx_device_reason(logits)
    if reason:
        return reason
    if logits.dtype not in FLOAT_DTYPES or logits.dim() != 2:
        return f"logits {logits.dtype} {tuple(logits.shape)} are not [N, V] fp16/bf16/fp32"
    if labels.dtype != torch.int64 or labels.dim() != 1:
        return f"labels {labels.dtype} {tuple(labels.shape)} are not int64 [N]"
    if any(t is not None and t.device != logits.device for t in (labels, *rows)):
        return "inputs on different devices"
    return None


def _supports_cross_entropy(logits, labels, *rest):
    return _ttx_reason(logits, labels)


def _supports_cross_entropy_backward(grad_loss, grad_lse, logits, labels, lse, *rest):
    return _ttx_reason(logits, labels, grad_loss, grad_lse, lse)


def ttx_forward(logits, labels, ignore_index, reduction, label_smoothing):
    """The kernel's per-row losses and lse (and rows' sums, with label smoothing), smoothed and reduced over rows
    by torch (deterministic: no atomics)."""
    row_sum = logits.new_empty(logits.shape[:1], dtype=torch.float32) if label_smoothing else None
    row_loss, lse = _kernels().cross_entropy_fwd(logits, labels, ignore_index, row_sum=row_sum)
    row_loss = cross_entropy_smoothed(row_loss, lse, row_sum, labels, ignore_index, logits.shape[1], label_smoothing)
    return cross_entropy_reduce(row_loss, labels, ignore_index, reduction), lse


def ttx_backward(grad_loss, grad_lse, logits, labels, lse, ignore_index, reduction, label_smoothing):
    a, b, c = cross_entropy_row_grads(grad_loss, grad_lse, labels, ignore_index, reduction, logits.shape[1],
                                      label_smoothing)
    return _kernels().cross_entropy_bwd(logits, labels, lse, a, b, c=c)


def _traceable_cross_entropy(logits, *rest) -> bool:
    """Only the class count sets the block size: any number of rows (tokens) inlines."""
    return not interpreting() and isinstance(logits.shape[1], int)


def _traceable_cross_entropy_backward(grad_loss, grad_lse, logits, *rest) -> bool:
    return _traceable_cross_entropy(logits)


lowering.register_impl("cross_entropy", "ttx", ttx_forward, supports=_supports_cross_entropy,
                       traceable=_traceable_cross_entropy)
lowering.register_impl("cross_entropy_backward", "ttx", ttx_backward, supports=_supports_cross_entropy_backward,
                       traceable=_traceable_cross_entropy_backward)


# -------------------------------------------------------------------------------------------- target: torch_npu
# The torch reference (fp32 per chunk of rows, dlogits in the logits' dtype) on npu tensors: no torch_npu op is
# mapped to the loss yet. Registered so that the report names torch_npu, not a fallback.
def _npu_reason(logits):
    return None if logits.device.type == "npu" else f"torch_npu runs on npu tensors, not {logits.device.type}"


lowering.register_impl("cross_entropy", "torch_npu", reference, supports=lambda logits, *rest: _npu_reason(logits),
                       **lowering.TRACEABLE)
lowering.register_impl("cross_entropy_backward", "torch_npu", reference_backward,
                       supports=lambda grad_loss, grad_lse, logits, *rest: _npu_reason(logits), **lowering.TRACEABLE)


# ------------------------------------------------------------------------------------------ DTensor (sharding.py)
# Each row's loss is its own: logits and labels sharded on rows stay local for reduction "none" (the losses shard
# too) and "sum" (each rank's sum is a partial sum). "mean" divides by the count of rows not ignored across every
# rank, and a vocabulary shard needs the row's whole log-sum-exp: DTensor gathers for those.
def _rows(reduction, **_):
    return [0] if reduction in ("none", "sum") else []


def _loss(reduction, **_):
    return [sharding.SAME if reduction == "none" else sharding.PARTIAL, sharding.SAME]


def _grad_loss(spec, dim):
    from torch.distributed.tensor import Replicate, Shard
    return Shard(0) if spec.ndim == 1 else Replicate()  # a scalar's gradient reaches every rank whole


sharding.register_local_sharding(torch.ops.mojo.cross_entropy.default,
                                 {"logits": sharding.SAME, "labels": sharding.SAME}, _loss, dims=_rows)
sharding.register_local_sharding(torch.ops.mojo.cross_entropy_backward.default,
                                 {"grad_loss": _grad_loss, "grad_lse": sharding.SAME, "logits": sharding.SAME,
                                  "labels": sharding.SAME, "lse": sharding.SAME}, [sharding.SAME], dims=_rows)
