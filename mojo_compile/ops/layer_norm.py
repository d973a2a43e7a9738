"""LayerNorm as a Mojo op: `mojo::layer_norm(x, weight, bias, eps)` -> (y, mean, rstd), what `F.layer_norm(x,
(x.shape[-1],), weight, bias, eps)` computes, declared with its implementations in this module (the extension API:
docs/adding-a-fusion.md; the kernels in kernels/layer_norm.py, the patterns in patterns/layer_norm.py).

    x       [..., N] bf16 / fp16 / fp32
    weight  [N] or None; bias [N] or None
    y       like x: (x - mean) / sqrt(var + eps) * weight + bias, var the biased variance, computed in fp32 and
            rounded once to x's dtype (eager's kernels do the same)
    mean, rstd  fp32 [...]: the statistics of each row, for the backward

Backward `mojo::layer_norm_backward(grad_y, x, weight, mean, rstd, eps, weight_grad, bias_grad)` -> (grad_x,
grad_weight, grad_bias); a parameter gradient not asked for is an empty tensor, never computed.

Implementations:
  torch  aten's own layer norm and its backward: eager's numbers, bitwise. The backward takes the saved fp32
         statistics where aten keeps fp32 ones, and recomputes them with aten where it does not (bf16 / fp16 on
         the CPU), so it is eager's exactly.
  ttx    kernels/layer_norm.py: rows up to MAX_FUSED_N, weight and bias in x's dtype, contiguous rows.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .. import lowering
from ..kernels.common import interpreting

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _check(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], target: str) -> None:
    if x.dim() == 0 or x.dtype not in FLOAT_DTYPES:
        raise ValueError(f"mojo layer_norm: x must be a bf16 / fp16 / fp32 tensor with a last dim, got {x.dtype} "
                         f"{tuple(x.shape)}")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and (p.dim() != 1 or p.shape[0] != x.shape[-1]):
            raise ValueError(f"mojo layer_norm: {name} must be [{x.shape[-1]}], got {tuple(p.shape)}")
    lowering.check_target_name(target)


# ---------------------------------------------------------------------------------------------------------- the ops
@torch.library.custom_op("mojo::layer_norm", mutates_args=())
def layer_norm(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], eps: float,
               target: str = "torch") -> tuple[Tensor, Tensor, Tensor]:
    """(y like x, mean and rstd fp32 shaped x.shape[:-1])."""
    _check(x, weight, bias, target)
    return lowering.call("layer_norm", target, x, weight, bias, float(eps))


@layer_norm.register_fake
def _(x, weight, bias, eps, target="torch"):
    stats = x.new_empty(x.shape[:-1], dtype=torch.float32)
    return torch.empty_like(x, memory_format=torch.contiguous_format), stats, torch.empty_like(stats)


@torch.library.custom_op("mojo::layer_norm_backward", mutates_args=())
def layer_norm_backward(grad_y: Tensor, x: Tensor, weight: Optional[Tensor], mean: Tensor, rstd: Tensor, eps: float,
                        weight_grad: bool, bias_grad: bool, target: str) -> tuple[Tensor, Tensor, Tensor]:
    """(grad_x like x, grad_weight [N] or empty, grad_bias [N] or empty)."""
    _check(x, weight, None, target)
    return lowering.call("layer_norm_backward", target, grad_y, x, weight, mean, rstd, float(eps), weight_grad,
                         bias_grad)


@layer_norm_backward.register_fake
def _(grad_y, x, weight, mean, rstd, eps, weight_grad, bias_grad, target):
    n = x.shape[-1]
    dtype = weight.dtype if weight is not None else x.dtype
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            x.new_empty((n,) if weight_grad and weight is not None else (0,), dtype=dtype),
            x.new_empty((n,) if bias_grad else (0,), dtype=dtype))


def _setup(ctx, inputs, output):
    x, weight, bias, eps, target = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x, weight, mean, rstd)
    ctx.mark_non_differentiable(mean, rstd)
    ctx.eps, ctx.target = eps, target
    ctx.bias_dtype = bias.dtype if bias is not None else None


def _backward(ctx, grad_y, _grad_mean, _grad_rstd):
    x, weight, mean, rstd = ctx.saved_tensors
    want_w, want_b = ctx.needs_input_grad[1], ctx.needs_input_grad[2]
    dx, dw, db = layer_norm_backward(grad_y, x, weight, mean, rstd, ctx.eps, want_w, want_b, ctx.target)
    if want_b and ctx.bias_dtype is not None and db.dtype != ctx.bias_dtype:
        db = db.to(ctx.bias_dtype)
    return dx, (dw if want_w else None), (db if want_b else None), None, None


layer_norm.register_autograd(_backward, setup_context=_setup)
# Under CUDA autocast aten's layer_norm runs in fp32 (autocast's fp32 list): its inputs cast up, an fp32 result.
# The op does the same. (CPU autocast leaves layer_norm alone, and so does the op.)
torch.library.register_autocast("mojo::layer_norm", "cuda", torch.float32)
lowering.inline_in_inner_compiler(layer_norm, "layer_norm")
lowering.inline_in_inner_compiler(layer_norm_backward, "layer_norm_backward")


# ------------------------------------------------------------------------------------------------ target: torch
def _output_mask(weight, weight_grad, bias_grad):
    return [True, weight is not None and weight_grad, bias_grad]


def reference(x, weight, bias, eps):
    y, mean, rstd = torch.ops.aten.native_layer_norm(x, [x.shape[-1]], weight, bias, eps)
    stats_shape = x.shape[:-1]
    return y.contiguous(), mean.reshape(stats_shape).float(), rstd.reshape(stats_shape).float()


def _aten_keeps_fp32_statistics(x) -> bool:
    """aten's layer norm keeps its row statistics in fp32 on CUDA and for fp32 input; on the CPU a bf16 / fp16
    input's are rounded to that dtype."""
    return x.device.type != "cpu" or x.dtype == torch.float32


def reference_backward(grad_y, x, weight, mean, rstd, eps, weight_grad, bias_grad):
    # aten's backward on aten's own statistics: eager's gradients, bitwise. Where aten keeps them in fp32 they are
    # the saved ones; on the CPU with bf16 / fp16 they are recomputed, rounded as aten rounds them.
    n, dtype = x.shape[-1], weight.dtype if weight is not None else x.dtype
    if _aten_keeps_fp32_statistics(x):
        aten_mean, aten_rstd = mean.unsqueeze(-1), rstd.unsqueeze(-1)
    else:
        _, aten_mean, aten_rstd = torch.ops.aten.native_layer_norm(x, [n], weight, None, eps)
    bias_like = x.new_zeros((n,), dtype=dtype) if bias_grad else None  # aten reads only its dtype and device
    dx, dw, db = torch.ops.aten.native_layer_norm_backward(grad_y, x, [n], aten_mean, aten_rstd, weight, bias_like,
                                                           _output_mask(weight, weight_grad, bias_grad))
    return (dx.contiguous(), dw if dw is not None else x.new_empty((0,), dtype=dtype),
            db if db is not None else x.new_empty((0,), dtype=dtype))


_TRACEABLE = dict(traceable=lambda *args: True)  # torch ops: Inductor fuses them with their neighbours
lowering.register_impl("layer_norm", "torch", reference, **_TRACEABLE)
lowering.register_impl("layer_norm_backward", "torch", reference_backward, **_TRACEABLE)


# -------------------------------------------------------------------------------------------------- target: ttx
def _kernels():
    """kernels/layer_norm.py, imported on first use: Triton is needed only where ttx runs."""
    from ..kernels import layer_norm
    return layer_norm


def _reason(x, weight, *others):
    """Why the kernels cannot take these, or None."""
    try:
        kernels = _kernels()
    except ImportError as e:
        return f"the Triton kernels cannot be imported ({e})"
    if not (x.device.type == "cuda" or (x.device.type == "cpu" and interpreting())):
        return f"ttx does not run on {x.device.type} tensors here (TRITON_INTERPRET=1 interprets on the CPU)"
    if x.dtype not in FLOAT_DTYPES:
        return f"x is {x.dtype}, not fp16/bf16/fp32"
    if not isinstance(x.shape[-1], int) or x.shape[-1] > kernels.MAX_FUSED_N:
        return f"rows of {x.shape[-1]} elements: the kernels hold a row of at most {kernels.MAX_FUSED_N}"
    for p in (weight, *others):
        if p is not None and (p.dtype != x.dtype or p.device != x.device or (p.dim() == 1 and p.stride(0) != 1)):
            return "a weight, bias or gradient of another dtype or device than x, or strided"
    return None


def _supports(x, weight, bias, eps):
    return _reason(x, weight, bias)


def _supports_backward(grad_y, x, weight, mean, rstd, eps, weight_grad, bias_grad):
    return _reason(x, weight, grad_y)


def _traceable(*args):
    """Inductor launches the kernels itself, except under the interpreter (it cannot run on fake tensors)."""
    return not interpreting()


def ttx_forward(x, weight, bias, eps):
    return _kernels().layer_norm_fwd(x, weight, bias, eps)


def ttx_backward(grad_y, x, weight, mean, rstd, eps, weight_grad, bias_grad):
    return _kernels().layer_norm_bwd(grad_y, x, weight, mean, rstd, weight_grad, bias_grad)


lowering.register_impl("layer_norm", "ttx", ttx_forward, supports=_supports, traceable=_traceable)
lowering.register_impl("layer_norm_backward", "ttx", ttx_backward, supports=_supports_backward, traceable=_traceable)
