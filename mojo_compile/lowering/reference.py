"""Target `torch`: the pure-PyTorch reference of every Mojo op, and the last fallback of every other target.

Written as the eager spellings the patterns replace, so that on this target a compiled model computes exactly what
the uncompiled one does, rounding included. Outputs are contiguous, as the fake impls promise.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .table import Impl


def _normalise(x, weight, eps, weight_offset, cast):
    x32 = x.float()
    rstd = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    if cast in ("normed", "rstd"):
        y = x * rstd.to(x.dtype) if cast == "rstd" else (x32 * rstd).to(x.dtype)
        if weight is not None:  # == `weight * y` in the promoted dtype: the fp32 product of two halves is exact
            y = (y.float() * (weight.float() + weight_offset)).to(torch.promote_types(weight.dtype, x.dtype))
    else:  # "output": everything in fp32, one cast at the end
        y = x32 * rstd
        if weight is not None:
            y = y * (weight.float() + weight_offset)
        y = y.to(x.dtype)
    return y.contiguous(), rstd.squeeze(-1).contiguous()


def rms_norm(x, weight, eps, weight_offset, cast):
    return _normalise(x, weight, eps, weight_offset, cast)


def add_rms_norm(x, residual, weight, eps, weight_offset, cast):
    total = (x + residual).contiguous()
    y, rstd = _normalise(total, weight, eps, weight_offset, cast)
    return y, total, rstd


def rms_norm_backward(grad_y, x, weight, rstd, grad_residual, weight_offset, cast, weight_grad):
    """fp32 gradient of y = n * w_eff with n = x * rstd (the casts are treated as identities)."""
    g = grad_y.float()
    n = x.float() * rstd.unsqueeze(-1)
    grad_n = g if weight is None else g * (weight.float() + weight_offset)
    grad_x = rstd.unsqueeze(-1) * (grad_n - n * (grad_n * n).mean(-1, keepdim=True))
    if grad_residual is not None:
        grad_x = grad_x + grad_residual.float()
    if weight is not None and weight_grad:
        n_seen = n.to(x.dtype).float() if cast == "normed" else n  # the weight multiplied the rounded value
        grad_w = (g * n_seen).reshape(-1, x.shape[-1]).sum(0).to(weight.dtype)
    else:
        grad_w = x.new_empty((0,))
    return grad_x.to(x.dtype).contiguous(), grad_w


# --------------------------------------------------------------------------------------------------- gated act
ACTIVATIONS = {"silu": F.silu, "gelu_tanh": lambda g: F.gelu(g, approximate="tanh"), "gelu": F.gelu}


def _act_backward(grad_a, gate, act):
    if act == "silu":
        return torch.ops.aten.silu_backward(grad_a, gate)
    return torch.ops.aten.gelu_backward(grad_a, gate, approximate="tanh" if act == "gelu_tanh" else "none")


def _halves(gate_up, gate_first):
    first, second = gate_up.chunk(2, -1)
    return (first, second) if gate_first else (second, first)


def gated_act(gate, up, act):
    return (ACTIVATIONS[act](gate) * up).contiguous()


def gated_act_fused(gate_up, act, gate_first):
    return gated_act(*_halves(gate_up, gate_first), act)


def gated_act_backward(grad_y, gate, up, act):
    """Eager autograd of act(gate) * up, step for step (the same roundings)."""
    grad_up = grad_y * ACTIVATIONS[act](gate)
    grad_gate = _act_backward(grad_y * up, gate, act)
    return grad_gate.contiguous(), grad_up.contiguous()


def gated_act_fused_backward(grad_y, gate_up, act, gate_first):
    grad_gate, grad_up = gated_act_backward(grad_y, *_halves(gate_up, gate_first), act)
    return torch.cat([grad_gate, grad_up] if gate_first else [grad_up, grad_gate], -1)


def _traceable(*args) -> bool:
    return True


TABLE = {
    "rms_norm": Impl(rms_norm, traceable=_traceable),
    "add_rms_norm": Impl(add_rms_norm, traceable=_traceable),
    "rms_norm_backward": Impl(rms_norm_backward, traceable=_traceable),
    "gated_act": Impl(gated_act, traceable=_traceable),
    "gated_act_fused": Impl(gated_act_fused, traceable=_traceable),
    "gated_act_backward": Impl(gated_act_backward, traceable=_traceable),
    "gated_act_fused_backward": Impl(gated_act_fused_backward, traceable=_traceable),
}
