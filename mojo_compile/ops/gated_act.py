"""The gated MLP activation as Mojo ops: `mojo::gated_act(gate, up)` = act(gate) * up (SwiGLU, GeGLU) and
`mojo::gated_act_fused(gate_up)` for a fused gate_up projection [..., 2I] split in halves (Phi3, GLM: `chunk(2)`),
which reads the halves in place -- the chunk is never copied and the backward writes grad_gate_up without a cat.

act: "silu", "gelu_tanh" (F.gelu(approximate="tanh")), "gelu" (exact). Numerics are eager's: act computed in fp32
and rounded to the input dtype, then the product rounded (a bf16 SwiGLU is bit-exact on every target).

Implementations, registered below the ops (docs/adding-a-fusion.md):
  torch      eager's ops, step for step: act then the product; the backward as eager's autograd computes it.
  ttx        kernels/gated_act.py: one elementwise pass, the halves of gate_up read in place.
  torch_npu  npu_swiglu for the fused SwiGLU with the gate first (silu of its first half times the second); the
             two-tensor form would need a cat and, like the other activations and the backwards, runs on the torch
             reference.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .. import lowering, sharding
from ..lowering.reference import ACTIVATIONS, activation, differentiable_grads
from ..kernels.common import ttx_elementwise_reason, ttx_traceable



def _check(act: str, target: str, *tensors: Tensor) -> None:
    if act not in ACTIVATIONS:
        raise ValueError(f"mojo gated_act: act must be one of {ACTIVATIONS}, got {act!r}")
    if any(t.shape != tensors[0].shape or t.dtype != tensors[0].dtype for t in tensors):
        raise ValueError(f"mojo gated_act: gate and up must match in shape and dtype, got "
                         f"{[(tuple(t.shape), t.dtype) for t in tensors]}")
    lowering.check_target_name(target)


def _half_shape(gate_up: Tensor) -> list:
    if gate_up.shape[-1] % 2:
        raise ValueError(f"mojo gated_act_fused: the gate_up dim must be even, got {gate_up.shape[-1]}")
    return [*gate_up.shape[:-1], gate_up.shape[-1] // 2]


# ---------------------------------------------------------------------------------------------------------- forward
@torch.library.custom_op("mojo::gated_act", mutates_args=())
def gated_act(gate: Tensor, up: Tensor, act: str = "silu", target: str = "torch") -> Tensor:
    """act(gate) * up, a new contiguous tensor."""
    _check(act, target, gate, up)
    return lowering.call("gated_act", target, gate, up, act)


@gated_act.register_fake
def _(gate, up, act="silu", target="torch"):
    return gate.new_empty(gate.shape)


@torch.library.custom_op("mojo::gated_act_fused", mutates_args=())
def gated_act_fused(gate_up: Tensor, act: str = "silu", gate_first: bool = True, target: str = "torch") -> Tensor:
    """act(gate) * up with (gate, up) = gate_up.chunk(2, -1) (swapped when not gate_first)."""
    _check(act, target, gate_up)
    _half_shape(gate_up)
    return lowering.call("gated_act_fused", target, gate_up, act, gate_first)


@gated_act_fused.register_fake
def _(gate_up, act="silu", gate_first=True, target="torch"):
    return gate_up.new_empty(_half_shape(gate_up))


# --------------------------------------------------------------------------------------------------------- backward
@torch.library.custom_op("mojo::gated_act_backward", mutates_args=())
def gated_act_backward(grad_y: Tensor, gate: Tensor, up: Tensor, act: str, target: str) -> tuple[Tensor, Tensor]:
    """(grad_gate, grad_up)."""
    _check(act, target, grad_y, gate, up)
    return lowering.call("gated_act_backward", target, grad_y, gate, up, act)


@gated_act_backward.register_fake
def _(grad_y, gate, up, act, target):
    return gate.new_empty(gate.shape), up.new_empty(up.shape)


@torch.library.custom_op("mojo::gated_act_fused_backward", mutates_args=())
def gated_act_fused_backward(grad_y: Tensor, gate_up: Tensor, act: str, gate_first: bool, target: str) -> Tensor:
    """grad of gate_up, both halves."""
    _check(act, target, gate_up)
    return lowering.call("gated_act_fused_backward", target, grad_y, gate_up, act, gate_first)


@gated_act_fused_backward.register_fake
def _(grad_y, gate_up, act, gate_first, target):
    return gate_up.new_empty(gate_up.shape)


# --------------------------------------------------------------------------------------------------------- autograd
def _setup(ctx, inputs, output):
    gate, up, act, target = inputs
    ctx.save_for_backward(gate, up)
    ctx.params = (act, target)


def _backward(ctx, grad_y):
    gate, up = ctx.saved_tensors
    if torch.is_grad_enabled():  # create_graph=True (eager autograd; AOTAutograd traces backwards without it)
        # differentiable gradients, for a second-order gradient: autograd through the torch reference recomputed on
        # the saved gate and up (reference.differentiable_grads)
        grad_gate, grad_up = differentiable_grads(lambda g, u: (reference(g, u, ctx.params[0]),), (gate, up),
                                                  ctx.needs_input_grad[:2], (grad_y,))
        return grad_gate, grad_up, None, None
    grad_gate, grad_up = gated_act_backward(grad_y, gate, up, *ctx.params)
    return grad_gate, grad_up, None, None


gated_act.register_autograd(_backward, setup_context=_setup)


def _fused_setup(ctx, inputs, output):
    gate_up, act, gate_first, target = inputs
    ctx.save_for_backward(gate_up)
    ctx.params = (act, gate_first, target)


def _fused_backward(ctx, grad_y):
    (gate_up,) = ctx.saved_tensors
    if torch.is_grad_enabled():  # create_graph=True: as _backward, through the reference on the saved gate_up
        act, gate_first, _ = ctx.params
        (grad,) = differentiable_grads(lambda t: (fused_reference(t, act, gate_first),), (gate_up,), (True,),
                                       (grad_y,))
        return grad, None, None, None
    return gated_act_fused_backward(grad_y, gate_up, *ctx.params), None, None, None


gated_act_fused.register_autograd(_fused_backward, setup_context=_fused_setup)

for _op in (gated_act, gated_act_fused):
    lowering.recompute_in_backward(_op, "one elementwise pass over the gate and up inputs its backward keeps anyway; "
                                        "its output (what the down projection's weight gradient reads) is not kept")

for _op, _name in ((gated_act, "gated_act"), (gated_act_fused, "gated_act_fused"),
                   (gated_act_backward, "gated_act_backward"), (gated_act_fused_backward, "gated_act_fused_backward")):
    lowering.inline_in_inner_compiler(_op, _name)


# ------------------------------------------------------------------------------------------------ target: torch


def _act_backward(grad_a, gate, act):
    if act == "silu":
        return torch.ops.aten.silu_backward(grad_a, gate)
    return torch.ops.aten.gelu_backward(grad_a, gate, approximate="tanh" if act == "gelu_tanh" else "none")


def _halves(gate_up, gate_first):
    first, second = gate_up.chunk(2, -1)
    return (first, second) if gate_first else (second, first)


def reference(gate, up, act):
    return (activation(gate, act) * up).contiguous()


def fused_reference(gate_up, act, gate_first):
    return reference(*_halves(gate_up, gate_first), act)


def reference_backward(grad_y, gate, up, act):
    """Eager autograd of act(gate) * up, step for step (the same roundings)."""
    grad_up = grad_y * activation(gate, act)
    grad_gate = _act_backward(grad_y * up, gate, act)
    return grad_gate.contiguous(), grad_up.contiguous()


def fused_reference_backward(grad_y, gate_up, act, gate_first):
    grad_gate, grad_up = reference_backward(grad_y, *_halves(gate_up, gate_first), act)
    return torch.cat([grad_gate, grad_up] if gate_first else [grad_up, grad_gate], -1)


lowering.register_impl("gated_act", "torch", reference, **lowering.TRACEABLE)
lowering.register_impl("gated_act_fused", "torch", fused_reference, **lowering.TRACEABLE)
lowering.register_impl("gated_act_backward", "torch", reference_backward, **lowering.TRACEABLE)
lowering.register_impl("gated_act_fused_backward", "torch", fused_reference_backward, **lowering.TRACEABLE)


# -------------------------------------------------------------------------------------------------- target: ttx
def _kernels():
    """kernels/gated_act.py, imported on first use: Triton is needed only where ttx runs."""
    from ..kernels import gated_act as kernels
    return kernels


def ttx_forward(gate, up, act):
    return _kernels().gated_act_fwd(gate, up, act)


def ttx_fused_forward(gate_up, act, gate_first):
    return _kernels().gated_act_fused_fwd(gate_up, act, gate_first)


def ttx_backward(grad_y, gate, up, act):
    return _kernels().gated_act_bwd(grad_y, gate, up, act)


def ttx_fused_backward(grad_y, gate_up, act, gate_first):
    return _kernels().gated_act_fused_bwd(grad_y, gate_up, act, gate_first)


def _supports(gate, up, act):
    return ttx_elementwise_reason(gate, up)


def _supports_fused(gate_up, act, gate_first):
    return ttx_elementwise_reason(gate_up)


def _supports_backward(grad_y, gate, up, act):
    return ttx_elementwise_reason(grad_y, gate, up)


def _supports_fused_backward(grad_y, gate_up, act, gate_first):
    return ttx_elementwise_reason(grad_y, gate_up)


lowering.register_impl("gated_act", "ttx", ttx_forward, supports=_supports, traceable=ttx_traceable)
lowering.register_impl("gated_act_fused", "ttx", ttx_fused_forward, supports=_supports_fused, traceable=ttx_traceable)
lowering.register_impl("gated_act_backward", "ttx", ttx_backward, supports=_supports_backward, traceable=ttx_traceable)
lowering.register_impl("gated_act_fused_backward", "ttx", ttx_fused_backward, supports=_supports_fused_backward,
                       traceable=ttx_traceable)


# -------------------------------------------------------------------------------------------- target: torch_npu
def _npu_reason(gate_up, act, gate_first):
    if act != "silu" or not gate_first:
        return "npu_swiglu computes silu(first half) * second half only"
    if gate_up.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return f"npu_swiglu takes fp16/bf16/fp32, not {gate_up.dtype}"
    if gate_up.numel() == 0:
        return "npu_swiglu takes no empty tensor"
    if gate_up.device.type != "npu":
        return f"torch_npu runs on npu tensors, not {gate_up.device.type}"
    return None


def npu_fused_forward(gate_up, act, gate_first):
    import torch_npu

    return torch_npu.npu_swiglu(gate_up.contiguous(), dim=-1)  # (it takes no other layout)


lowering.register_impl("gated_act_fused", "torch_npu", npu_fused_forward, supports=_npu_reason)


# ------------------------------------------------------------------------------------------ DTensor (sharding.py)
# Elementwise: gate and up sharded alike on any dim (tensor parallel's column-sharded projections) stay local. The
# fused form reads both halves of its last dim: local on the leading dims only.
def _every_dim(gate=None, grad_y=None, **_):
    return range((gate if gate is not None else grad_y).ndim)


def _leading_dims(gate_up, **_):
    return range(gate_up.ndim - 1)


sharding.register_local_sharding(torch.ops.mojo.gated_act.default, {"gate": sharding.SAME, "up": sharding.SAME},
                                 [sharding.SAME], dims=_every_dim)
sharding.register_local_sharding(torch.ops.mojo.gated_act_backward.default,
                                 {"grad_y": sharding.SAME, "gate": sharding.SAME, "up": sharding.SAME},
                                 [sharding.SAME, sharding.SAME], dims=_every_dim)
sharding.register_local_sharding(torch.ops.mojo.gated_act_fused.default, {"gate_up": sharding.SAME}, [sharding.SAME],
                                 dims=_leading_dims)
sharding.register_local_sharding(torch.ops.mojo.gated_act_fused_backward.default,
                                 {"grad_y": sharding.SAME, "gate_up": sharding.SAME}, [sharding.SAME],
                                 dims=_leading_dims)
