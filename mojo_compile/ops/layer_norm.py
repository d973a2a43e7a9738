"""LayerNorm as Mojo ops, declared with their implementations in this module (the extension API:
docs/adding-a-fusion.md; the kernels in kernels/layer_norm.py, the patterns in patterns/layer_norm.py):

    mojo::layer_norm(x, weight, bias, eps) -> (y, mean, rstd)
        what `F.layer_norm(x, (x.shape[-1],), weight, bias, eps)` computes
    mojo::add_layer_norm(x, residual, weight, bias, eps) -> (y, sum, mean, rstd)
        sum = x + residual (in their dtype, as eager adds), then the layer norm of sum: the Mojo Opset "pre"
        residual contract (normalised sum, sum), for blocks that add the residual, keep the sum as the next
        residual and normalise it (GPT-2, StableLM, Starcoder2, OPT, GPT-NeoX without parallel residual)

    x       [..., N] bf16 / fp16 / fp32
    weight  [N] or None; bias [N] or None
    y       like x: (x - mean) / sqrt(var + eps) * weight + bias, var the biased variance, computed in fp32 and
            rounded once to x's dtype (eager's kernels do the same)
    residual  like x (same shape and dtype)
    mean, rstd  fp32 [...]: the statistics of each row (of the sum), for the backward

Backward `mojo::layer_norm_backward(grad_y, x, weight, mean, rstd, eps, weight_grad, bias_grad, grad_residual)` ->
(grad_x, grad_weight, grad_bias); x is the normalised input (add_layer_norm's sum); grad_residual, where given, is
the gradient reaching the sum through its other uses, added to grad_x (the gradient of both x and residual). A
parameter gradient not asked for is an empty tensor, never computed.

Implementations:
  torch  aten's own add, layer norm and backward: eager's numbers, bitwise. The backward takes the saved fp32
         statistics where aten keeps fp32 ones, and recomputes them with aten where it does not (bf16 / fp16 on
         the CPU), so it is eager's exactly.
  ttx    kernels/layer_norm.py: rows up to MAX_FUSED_N, weight and bias in x's dtype, contiguous rows.
  torch_npu  aten's layer norm (torch_npu's own kernel on the NPU); npu_add_layer_norm for the residual form.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .. import lowering, sharding
from ..kernels.common import interpreting
from ..lowering.reference import differentiable_grads, sum_rows

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _check(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], target: str,
           residual: Optional[Tensor] = None) -> None:
    if x.dim() == 0 or x.dtype not in FLOAT_DTYPES:
        raise ValueError(f"mojo layer_norm: x must be a bf16 / fp16 / fp32 tensor with a last dim, got {x.dtype} "
                         f"{tuple(x.shape)}")
    if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype):
        raise ValueError(f"mojo add_layer_norm / layer_norm_backward: {tuple(residual.shape)} {residual.dtype} "
                         f"must match x {tuple(x.shape)} {x.dtype} in shape and dtype")
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


@torch.library.custom_op("mojo::add_layer_norm", mutates_args=())
def add_layer_norm(x: Tensor, residual: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], eps: float,
                   target: str = "torch") -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(y like x, sum like x, mean and rstd of the sum fp32 shaped x.shape[:-1])."""
    _check(x, weight, bias, target, residual)
    return lowering.call("add_layer_norm", target, x, residual, weight, bias, float(eps))


@add_layer_norm.register_fake
def _(x, residual, weight, bias, eps, target="torch"):
    stats = x.new_empty(x.shape[:-1], dtype=torch.float32)
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            torch.empty_like(x, memory_format=torch.contiguous_format), stats, torch.empty_like(stats))


@torch.library.custom_op("mojo::layer_norm_backward", mutates_args=())
def layer_norm_backward(grad_y: Tensor, x: Tensor, weight: Optional[Tensor], mean: Tensor, rstd: Tensor, eps: float,
                        weight_grad: bool, bias_grad: bool, grad_residual: Optional[Tensor],
                        target: str) -> tuple[Tensor, Tensor, Tensor]:
    """(grad_x like x, grad_weight [N] or empty, grad_bias [N] or empty)."""
    _check(x, weight, None, target, grad_residual)
    return lowering.call("layer_norm_backward", target, grad_y, x, weight, mean, rstd, float(eps), weight_grad,
                         bias_grad, grad_residual)


@layer_norm_backward.register_fake
def _(grad_y, x, weight, mean, rstd, eps, weight_grad, bias_grad, grad_residual, target):
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
    if torch.is_grad_enabled():  # create_graph=True (eager autograd; AOTAutograd traces backwards without it)
        dx, dw = _differentiable(ctx, grad_y, x, weight, ctx.needs_input_grad[0], want_w)
        return dx, dw, _differentiable_bias_grad(ctx, grad_y, want_b), None, None
    dx, dw, db = layer_norm_backward(grad_y, x, weight, mean, rstd, ctx.eps, want_w, want_b, None, ctx.target)
    return dx, (dw if want_w else None), _bias_grad(ctx, db, want_b), None, None


def _differentiable(ctx, grad_y, x, weight, want_x, want_w):
    """(dx, dweight) differentiable themselves, for a second-order gradient: autograd through the torch reference
    (reference.differentiable_grads). Recomputed: the norm of the saved x (mean and rstd too: the saved ones are this
    op's outputs, marked non-differentiable). The bias is not saved and not needed: y's gradient in x and the weight
    does not depend on it."""
    return differentiable_grads(lambda x, w: reference(x, w, None, ctx.eps)[:1], (x, weight), (want_x, want_w),
                                (grad_y,))


def _differentiable_bias_grad(ctx, grad_y, wanted):
    """d bias = grad_y summed over the rows, in the bias's dtype: linear in grad_y, so differentiable as it is."""
    if not wanted or ctx.bias_dtype is None:
        return None
    return sum_rows(grad_y).to(ctx.bias_dtype)


def _bias_grad(ctx, db, wanted):
    if wanted and ctx.bias_dtype is not None and db.dtype != ctx.bias_dtype:
        return db.to(ctx.bias_dtype)
    return db if wanted else None


def _add_setup(ctx, inputs, output):
    _x, _residual, weight, bias, eps, target = inputs
    _, total, mean, rstd = output
    ctx.save_for_backward(total, weight, mean, rstd)
    ctx.mark_non_differentiable(mean, rstd)
    ctx.eps, ctx.target = eps, target
    ctx.bias_dtype = bias.dtype if bias is not None else None
    # An unused output's gradient comes as None: autograd's zeros for it would be a plain tensor where the output is
    # a DTensor (sequence parallelism), which a DTensor op refuses beside DTensors. zeros_like keeps the layout.
    ctx.set_materialize_grads(False)


def _add_backward(ctx, grad_y, grad_sum, _grad_mean, _grad_rstd):
    total, weight, mean, rstd = ctx.saved_tensors
    if grad_y is None:  # only the sum carries a gradient: the weight and bias get none, as in eager
        return grad_sum, grad_sum, None, None, None, None
    want_w, want_b = ctx.needs_input_grad[2], ctx.needs_input_grad[3]
    if torch.is_grad_enabled():  # create_graph=True: differentiable gradients (_differentiable)
        # the saved sum is this op's output: the second-order gradient reaches x and residual through it (this
        # backward again, with grad_y None)
        d_sum, dw = _differentiable(ctx, grad_y, total, weight, ctx.needs_input_grad[0] or ctx.needs_input_grad[1],
                                    want_w)
        if grad_sum is not None:
            d_sum = grad_sum if d_sum is None else d_sum + grad_sum
        return d_sum, d_sum, dw, _differentiable_bias_grad(ctx, grad_y, want_b), None, None
    d_sum, dw, db = layer_norm_backward(grad_y, total, weight, mean, rstd, ctx.eps, want_w, want_b, grad_sum,
                                        ctx.target)
    # x and residual are summed: both get the sum's gradient, one tensor, as eager's add backward hands them. (A
    # copy would cost a read and a write of the activation per site; autograd clones where a leaf's .grad needs it.)
    return d_sum, d_sum, (dw if want_w else None), _bias_grad(ctx, db, want_b), None, None


layer_norm.register_autograd(_backward, setup_context=_setup)
add_layer_norm.register_autograd(_add_backward, setup_context=_add_setup)
# Under CUDA autocast aten's layer_norm runs in fp32 (autocast's fp32 list): its inputs cast up, an fp32 result.
# The op does the same; the residual add before it is not on autocast's lists, so add_layer_norm stays in its
# inputs' dtype (its pattern refuses a site under autocast). (CPU autocast leaves layer_norm alone, and so does the
# op.)
torch.library.register_autocast("mojo::layer_norm", "cuda", torch.float32)
for _op, _name in ((layer_norm, "layer_norm"), (add_layer_norm, "add_layer_norm"),
                   (layer_norm_backward, "layer_norm_backward")):
    lowering.inline_in_inner_compiler(_op, _name)


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


def add_reference(x, residual, weight, bias, eps):
    total = x + residual
    y, mean, rstd = reference(total, weight, bias, eps)
    return y, total, mean, rstd


def reference_backward(grad_y, x, weight, mean, rstd, eps, weight_grad, bias_grad, grad_residual):
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
    if grad_residual is not None:  # eager's autograd adds the two gradients of the sum in its dtype
        dx = dx + grad_residual
    return (dx.contiguous(), dw if dw is not None else x.new_empty((0,), dtype=dtype),
            db if db is not None else x.new_empty((0,), dtype=dtype))


lowering.register_impl("layer_norm", "torch", reference, **lowering.TRACEABLE)
lowering.register_impl("add_layer_norm", "torch", add_reference, **lowering.TRACEABLE)
lowering.register_impl("layer_norm_backward", "torch", reference_backward, **lowering.TRACEABLE)


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


def _supports_add(x, residual, weight, bias, eps):
    return _reason(x, weight, bias)  # residual: x's shape and dtype (the op checks)


def _supports_backward(grad_y, x, weight, mean, rstd, eps, weight_grad, bias_grad, grad_residual):
    return _reason(x, weight, grad_y, grad_residual)


def _traceable(*args):
    """Inductor launches the kernels itself, except under the interpreter (it cannot run on fake tensors)."""
    return not interpreting()


def ttx_forward(x, weight, bias, eps):
    return _kernels().layer_norm_fwd(x, weight, bias, eps)


def ttx_add_forward(x, residual, weight, bias, eps):
    return _kernels().add_layer_norm_fwd(x, residual, weight, bias, eps)


def ttx_backward(grad_y, x, weight, mean, rstd, eps, weight_grad, bias_grad, grad_residual):
    return _kernels().layer_norm_bwd(grad_y, x, weight, mean, rstd, weight_grad, bias_grad,
                                     grad_residual=grad_residual)


lowering.register_impl("layer_norm", "ttx", ttx_forward, supports=_supports, traceable=_traceable)
lowering.register_impl("add_layer_norm", "ttx", ttx_add_forward, supports=_supports_add, traceable=_traceable)
lowering.register_impl("layer_norm_backward", "ttx", ttx_backward, supports=_supports_backward, traceable=_traceable)


# -------------------------------------------------------------------------------------------- target: torch_npu
# The plain norm is aten's own layer norm, which torch_npu implements on the NPU with its fused kernel (Ascend's
# documented replacement for npu_layer_norm_eval). The residual form is npu_add_layer_norm (aclnnAddLayerNorm):
# x = x1 + x2, y = (x - mean) * rstd * gamma + beta, mean and rstd fp32 shaped [..., 1], x returned with
# additional_output=True; gamma and beta are required, so ones and zeros stand in for a missing weight or bias. The
# backward runs on the torch reference (no NPU op is mapped to it), from the statistics the NPU op returns.
def _npu_reason(x, *params):
    if x.device.type != "npu":
        return f"torch_npu runs on npu tensors, not {x.device.type}"
    if x.dtype not in FLOAT_DTYPES:
        return f"x is {x.dtype}, not fp16/bf16/fp32"
    if any(p is not None and p.dtype != x.dtype for p in params):
        return "npu_add_layer_norm takes gamma and beta in the dtype of x"
    return None


def npu_add_forward(x, residual, weight, bias, eps):
    import torch_npu

    n = x.shape[-1]
    gamma = weight if weight is not None else torch.ones(n, dtype=x.dtype, device=x.device)
    beta = bias if bias is not None else torch.zeros(n, dtype=x.dtype, device=x.device)
    y, mean, rstd, total = torch_npu.npu_add_layer_norm(x, residual, gamma, beta, eps, True)
    stats = x.shape[:-1]
    return y, total, mean.reshape(stats).float(), rstd.reshape(stats).float()


lowering.register_impl("layer_norm", "torch_npu", reference, supports=lambda x, *rest: _npu_reason(x),
                       **lowering.TRACEABLE)
lowering.register_impl("add_layer_norm", "torch_npu", npu_add_forward,
                       supports=lambda x, residual, weight, bias, eps: _npu_reason(x, weight, bias))


# ------------------------------------------------------------------------------------------ DTensor (sharding.py)
# Each row is normalised alone: sharded on any token dim (sequence parallel) the ops run on the local rows; weight
# and bias are replicated and their gradients partial sums over each rank's rows.
_PARAMS = {"weight": sharding.REPLICATE, "bias": sharding.REPLICATE}
sharding.register_local_sharding(torch.ops.mojo.layer_norm.default, {"x": sharding.SAME, **_PARAMS},
                                 [sharding.SAME] * 3, dims=sharding.token_dims)
sharding.register_local_sharding(torch.ops.mojo.add_layer_norm.default,
                                 {"x": sharding.SAME, "residual": sharding.SAME, **_PARAMS}, [sharding.SAME] * 4,
                                 dims=sharding.token_dims)
sharding.register_local_sharding(torch.ops.mojo.layer_norm_backward.default,
                                 {"grad_y": sharding.SAME, "x": sharding.SAME, "weight": sharding.REPLICATE,
                                  "mean": sharding.SAME, "rstd": sharding.SAME, "grad_residual": sharding.SAME},
                                 [sharding.SAME, sharding.PARTIAL, sharding.PARTIAL], dims=sharding.token_dims)
