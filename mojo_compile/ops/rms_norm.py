"""The RMSNorm family of Mojo ops: `mojo::rms_norm`, `mojo::add_rms_norm` and their shared backward.

Each op is a functional `torch.library.custom_op` (no input is mutated) with a fake impl for symbolic shapes and
an autograd formula whose backward is itself a Mojo op, so Inductor and AOTAutograd see opaque nodes in forward
and backward alike. The real work is delegated to the target named by the `target` argument (see lowering/).

Numerics are parameters, because HF models disagree on where the cast back to the input dtype happens:

    cast="normed"   y = (w + offset) * (x32 * rstd).to(x.dtype)          Llama, Qwen, Mistral, Llama4 (w on the right)
    cast="output"   y = ((x32 * rstd) * (w32 + offset)).to(x.dtype)      OLMo2, Gemma (offset=1), F.rms_norm
    cast="rstd"     y = x * rstd.to(x.dtype)                              DeepSeek-V4 unweighted norm

with x32 = x.float(), rstd = rsqrt(mean(x32**2, -1) + eps). `add_rms_norm(x, residual)` first forms
sum = x + residual in the input dtype (the "pre" residual contract of Mojo Opset: it returns the normalised sum and
the sum itself, which feeds the next residual add).

Implementations, registered below the ops (docs/adding-a-fusion.md):
  torch      the eager spellings, rounding included (lowering/reference.py's `normalise` and `rms_norm_grad`,
             which qk_norm_rope's reference shares); the backward in fp32.
  ttx        kernels/rms_norm.py.
  torch_npu  npu_rms_norm / npu_add_rms_norm, which compute in fp32 and round once at the end ("output" numerics).
             The Llama spelling ("normed") rounds the normalised value before the weight multiply, so it runs the
             NPU op with a unit gamma (which is exactly that rounded value) and multiplies by the weight afterwards.
             The backward runs on the torch reference.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .. import lowering, sharding
from ..kernels.common import FLOAT_DTYPES, ttx_device_reason, ttx_traceable
from ..lowering.reference import differentiable_grads, normalise, rms_norm_grad

CAST_MODES = ("normed", "output", "rstd")


def rms_norm_out_dtype(x: Tensor, weight: Optional[Tensor], cast: str) -> torch.dtype:
    if weight is not None and cast in ("normed", "rstd"):
        return torch.promote_types(weight.dtype, x.dtype)  # `w * y.to(x.dtype)` promotes
    return x.dtype


def _check_params(cast: str, target: str) -> None:
    if cast not in CAST_MODES:
        raise ValueError(f"mojo rms_norm: cast must be one of {CAST_MODES}, got {cast!r}")
    lowering.check_target_name(target)


# ---------------------------------------------------------------------------------------------------------- forward
@torch.library.custom_op("mojo::rms_norm", mutates_args=())
def rms_norm(
    x: Tensor, weight: Optional[Tensor], eps: float, weight_offset: float = 0.0, cast: str = "normed",
    target: str = "torch",
) -> tuple[Tensor, Tensor]:
    """RMSNorm over the last dim. Returns (y, rstd) with rstd = 1/rms in fp32, shape x.shape[:-1]."""
    _check_params(cast, target)
    return lowering.call("rms_norm", target, x, weight, eps, weight_offset, cast)


@rms_norm.register_fake
def _(x, weight, eps, weight_offset=0.0, cast="normed", target="torch"):
    return (x.new_empty(x.shape, dtype=rms_norm_out_dtype(x, weight, cast)),
            x.new_empty(x.shape[:-1], dtype=torch.float32))


@torch.library.custom_op("mojo::add_rms_norm", mutates_args=())
def add_rms_norm(
    x: Tensor, residual: Tensor, weight: Optional[Tensor], eps: float, weight_offset: float = 0.0,
    cast: str = "normed", target: str = "torch",
) -> tuple[Tensor, Tensor, Tensor]:
    """sum = x + residual (input dtype); returns (rms_norm(sum), sum, rstd)."""
    _check_params(cast, target)
    if x.shape != residual.shape or x.dtype != residual.dtype:
        raise ValueError(f"mojo add_rms_norm: x {tuple(x.shape)} {x.dtype} and residual "
                         f"{tuple(residual.shape)} {residual.dtype} must match in shape and dtype")
    return lowering.call("add_rms_norm", target, x, residual, weight, eps, weight_offset, cast)


@add_rms_norm.register_fake
def _(x, residual, weight, eps, weight_offset=0.0, cast="normed", target="torch"):
    out_dtype = rms_norm_out_dtype(x, weight, cast)
    return (x.new_empty(x.shape, dtype=out_dtype), x.new_empty(x.shape),
            x.new_empty(x.shape[:-1], dtype=torch.float32))


# --------------------------------------------------------------------------------------------------------- backward
@torch.library.custom_op("mojo::rms_norm_backward", mutates_args=())
def rms_norm_backward(
    grad_y: Tensor, x: Tensor, weight: Optional[Tensor], rstd: Tensor, grad_residual: Optional[Tensor],
    weight_offset: float, cast: str, weight_grad: bool, target: str,
) -> tuple[Tensor, Tensor]:
    """Returns (grad_x, grad_weight). grad_x includes `grad_residual` when given (the gradient reaching the sum of
    an add_rms_norm through its second output). grad_weight is empty when there is no weight or weight_grad is off."""
    _check_params(cast, target)
    return lowering.call("rms_norm_backward", target, grad_y, x, weight, rstd, grad_residual, weight_offset, cast,
                         weight_grad)


@rms_norm_backward.register_fake
def _(grad_y, x, weight, rstd, grad_residual, weight_offset, cast, weight_grad, target):
    grad_w = weight.new_empty(weight.shape) if weight is not None and weight_grad else x.new_empty((0,))
    return x.new_empty(x.shape), grad_w


# --------------------------------------------------------------------------------------------------------- autograd
def _rms_norm_setup(ctx, inputs, output):
    x, weight, eps, weight_offset, cast, target = inputs
    ctx.save_for_backward(x, weight, output[1])
    ctx.params = (weight_offset, cast, target)
    ctx.eps = eps  # for a second-order gradient only (differentiable_grads)


def _rms_norm_bwd(ctx, grad_y, _grad_rstd):
    if torch.is_grad_enabled():  # create_graph=True (eager autograd; AOTAutograd traces backwards without it)
        # recomputed: the norm of the saved x (rstd too: the saved one is this op's output, not a function of x)
        x, weight, _ = ctx.saved_tensors
        weight_offset, cast, _ = ctx.params
        grad_x, grad_w = differentiable_grads(
            lambda x, w: normalise(x, w, ctx.eps, weight_offset, cast)[:1], (x, weight), ctx.needs_input_grad[:2],
            (grad_y,))
        return grad_x, grad_w, None, None, None, None
    x, weight, rstd = ctx.saved_tensors
    weight_offset, cast, target = ctx.params
    weight_grad = weight is not None and ctx.needs_input_grad[1]
    grad_x, grad_w = rms_norm_backward(grad_y, x, weight, rstd, None, weight_offset, cast, weight_grad, target)
    return grad_x, (grad_w if weight_grad else None), None, None, None, None


rms_norm.register_autograd(_rms_norm_bwd, setup_context=_rms_norm_setup)


def _add_rms_norm_setup(ctx, inputs, output):
    _x, _residual, weight, eps, weight_offset, cast, target = inputs
    ctx.save_for_backward(output[1], weight, output[2])
    ctx.params = (weight_offset, cast, target)
    ctx.eps = eps  # for a second-order gradient only
    # An unused output's gradient comes as None: autograd's zeros for it would be a plain tensor where the output is
    # a DTensor (sequence parallelism), which a DTensor op refuses beside DTensors. zeros_like keeps the layout.
    ctx.set_materialize_grads(False)


def _add_rms_norm_bwd(ctx, grad_y, grad_sum, _grad_rstd):
    total, weight, rstd = ctx.saved_tensors
    if grad_y is None:  # only the sum carries a gradient: the weight gets none, as in eager
        return grad_sum, grad_sum, None, None, None, None, None
    weight_offset, cast, target = ctx.params
    if torch.is_grad_enabled():  # create_graph=True: differentiable gradients (differentiable_grads)
        # recomputed: the norm of the saved sum, which is this op's output: the second-order gradient reaches x and
        # residual through it (d sum / d x = d sum / d residual = 1, this backward again with grad_y None)
        grad_total, grad_w = differentiable_grads(
            lambda t, w: normalise(t, w, ctx.eps, weight_offset, cast)[:1], (total, weight),
            (ctx.needs_input_grad[0] or ctx.needs_input_grad[1], ctx.needs_input_grad[2]), (grad_y,))
        if grad_sum is not None:
            grad_total = grad_sum if grad_total is None else grad_total + grad_sum
        return grad_total, grad_total, grad_w, None, None, None, None
    weight_grad = weight is not None and ctx.needs_input_grad[2]
    grad_total, grad_w = rms_norm_backward(grad_y, total, weight, rstd, grad_sum, weight_offset, cast, weight_grad,
                                           target)
    return grad_total, grad_total, (grad_w if weight_grad else None), None, None, None, None


add_rms_norm.register_autograd(_add_rms_norm_bwd, setup_context=_add_rms_norm_setup)


for _op, _name in ((rms_norm, "rms_norm"), (add_rms_norm, "add_rms_norm"), (rms_norm_backward, "rms_norm_backward")):
    lowering.inline_in_inner_compiler(_op, _name)


# ------------------------------------------------------------------------------------------------ target: torch
def reference(x, weight, eps, weight_offset, cast):
    return normalise(x, weight, eps, weight_offset, cast)


def add_reference(x, residual, weight, eps, weight_offset, cast):
    total = x + residual  # (normalised in eager's layout: its reduction order, bit for bit)
    y, rstd = normalise(total, weight, eps, weight_offset, cast)
    return y, total.contiguous(), rstd


lowering.register_impl("rms_norm", "torch", reference, **lowering.TRACEABLE)
lowering.register_impl("add_rms_norm", "torch", add_reference, **lowering.TRACEABLE)
lowering.register_impl("rms_norm_backward", "torch", rms_norm_grad, **lowering.TRACEABLE)


# -------------------------------------------------------------------------------------------------- target: ttx
def _kernels():
    """kernels/rms_norm.py, imported on first use: Triton is needed only where ttx runs."""
    from ..kernels import rms_norm as kernels
    return kernels


def _rows_reason(x, weight, *others):
    reason = ttx_device_reason(x)
    if reason:
        return reason
    if x.dtype not in FLOAT_DTYPES:
        return f"input dtype {x.dtype} is not fp16/bf16/fp32"
    if x.dim() == 0:
        return "a 0-d input has no dim to normalise"
    if weight is not None:
        if weight.dtype not in FLOAT_DTYPES:
            return f"weight dtype {weight.dtype} is not fp16/bf16/fp32"
        if weight.dim() != 1 or weight.shape[0] != x.shape[-1] or weight.device != x.device:
            return f"weight {tuple(weight.shape)} on {weight.device} is not one value per column of x {tuple(x.shape)}"
        if weight.stride(0) != 1:
            return "weight is not contiguous"
    for t in others:
        if t is not None and (t.shape != x.shape or t.device != x.device):
            return f"a tensor of shape {tuple(t.shape)} does not match x {tuple(x.shape)}"
    return None


def ttx_forward(x, weight, eps, weight_offset, cast):
    y, _, rstd = _kernels().rms_norm_fwd(x, None, weight, eps, weight_offset, cast,
                                          rms_norm_out_dtype(x, weight, cast))
    return y, rstd


def ttx_add_forward(x, residual, weight, eps, weight_offset, cast):
    return _kernels().rms_norm_fwd(x, residual, weight, eps, weight_offset, cast,
                                   rms_norm_out_dtype(x, weight, cast))


def ttx_backward(grad_y, x, weight, rstd, grad_residual, weight_offset, cast, weight_grad):
    return _kernels().rms_norm_bwd(grad_y, x, weight, rstd, grad_residual, weight_offset, cast, weight_grad)


def _supports_rms_norm(x, weight, eps, weight_offset, cast):
    return _rows_reason(x, weight)


def _supports_add_rms_norm(x, residual, weight, eps, weight_offset, cast):
    return _rows_reason(x, weight, residual)


def _supports_backward(grad_y, x, weight, rstd, grad_residual, weight_offset, cast, weight_grad):
    return _rows_reason(x, weight, grad_y, grad_residual)


lowering.register_impl("rms_norm", "ttx", ttx_forward, supports=_supports_rms_norm, traceable=ttx_traceable)
lowering.register_impl("add_rms_norm", "ttx", ttx_add_forward, supports=_supports_add_rms_norm, traceable=ttx_traceable)
lowering.register_impl("rms_norm_backward", "ttx", ttx_backward, supports=_supports_backward, traceable=ttx_traceable)


# -------------------------------------------------------------------------------------------- target: torch_npu
def _npu_reason(x, weight, weight_offset, cast):
    if x.dtype not in FLOAT_DTYPES:
        return f"input dtype {x.dtype} is not fp16/bf16/fp32"
    if not 2 <= x.dim() <= 8:
        return f"a {x.dim()}-D input (npu_rms_norm takes 2 to 8 dims)"
    if cast == "rstd" and x.dtype != torch.float32:
        return "npu_rms_norm does not round the inverse root to the input dtype (cast='rstd')"
    if weight is not None and weight.dtype != x.dtype and cast != "normed":
        return f"npu_rms_norm takes gamma in the input dtype ({x.dtype}), the weight is {weight.dtype}"
    if weight_offset and cast != "normed" and x.dtype != torch.float32:
        return "gamma = 1 + w would be rounded to the input dtype before npu_rms_norm uses it"
    if x.device.type != "npu":
        return f"torch_npu runs on npu tensors, not {x.device.type}"
    return None


def _gamma(x, weight, weight_offset, cast):
    if weight is None or cast == "normed":
        return torch.ones(x.shape[-1], dtype=x.dtype, device=x.device)
    return weight + weight_offset if weight_offset else weight


def _finish(y, x, weight, weight_offset, cast):
    if cast == "normed" and weight is not None:  # Llama: the weight multiplies the rounded normalised value
        y = (y.float() * (weight.float() + weight_offset)).to(rms_norm_out_dtype(x, weight, cast))
    return y


def npu_forward(x, weight, eps, weight_offset, cast):
    import torch_npu

    y, rstd = torch_npu.npu_rms_norm(x, _gamma(x, weight, weight_offset, cast), epsilon=eps)
    return _finish(y, x, weight, weight_offset, cast), rstd.reshape(x.shape[:-1]).float()


def npu_add_forward(x, residual, weight, eps, weight_offset, cast):
    import torch_npu

    y, rstd, total = torch_npu.npu_add_rms_norm(x, residual, _gamma(x, weight, weight_offset, cast), epsilon=eps)
    return _finish(y, total, weight, weight_offset, cast), total, rstd.reshape(x.shape[:-1]).float()


def _npu_rms_reason(x, weight, eps, weight_offset, cast):
    return _npu_reason(x, weight, weight_offset, cast)


def _npu_add_reason(x, residual, weight, eps, weight_offset, cast):
    if x.numel() == 0:  # (npu_rms_norm takes one; npu_add_rms_norm does not)
        return "npu_add_rms_norm takes no empty tensor"
    return _npu_reason(x, weight, weight_offset, cast)


lowering.register_impl("rms_norm", "torch_npu", npu_forward, supports=_npu_rms_reason)
lowering.register_impl("add_rms_norm", "torch_npu", npu_add_forward, supports=_npu_add_reason)


# ------------------------------------------------------------------------------------------ DTensor (sharding.py)
# Each row is normalised alone: sharded on any token dim (sequence parallel) the norms run on the local rows; the
# weight is replicated and its gradient a partial sum over each rank's rows.
_ROWS = dict(dims=sharding.token_dims)
sharding.register_local_sharding(torch.ops.mojo.rms_norm.default, {"x": sharding.SAME, "weight": sharding.REPLICATE},
                                 [sharding.SAME, sharding.SAME], **_ROWS)
sharding.register_local_sharding(torch.ops.mojo.add_rms_norm.default,
                                 {"x": sharding.SAME, "residual": sharding.SAME, "weight": sharding.REPLICATE},
                                 [sharding.SAME] * 3, **_ROWS)
sharding.register_local_sharding(torch.ops.mojo.rms_norm_backward.default,
                                 {"grad_y": sharding.SAME, "x": sharding.SAME, "weight": sharding.REPLICATE,
                                  "rstd": sharding.SAME, "grad_residual": sharding.SAME},
                                 [sharding.SAME, sharding.PARTIAL], **_ROWS)
