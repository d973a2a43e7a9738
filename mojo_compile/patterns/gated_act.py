"""Gated MLP activations -> `mojo::gated_act` / `mojo::gated_act_fused` (../shared/reference/hf-spellings.md, M1-M2).

    M1  down(act(gate(x)) * up(x))                 Llama, Qwen, Mistral, Gemma (gelu tanh), ... either operand order
    M2  gate, up = gate_up(x).chunk(2, -1)         Phi3, GLM: up * act(gate); moonshine: hidden, gate = chunk -> the
                                                   gate is the second half

act is whatever `ACT2FN[...]` resolves to in the graph: aten.silu, aten.gelu(approximate="tanh"), exact aten.gelu.
A product of two operands of different shapes (a broadcast) or dtypes is not a gated activation and stays.
Non-gated MLPs (fc1 -> act -> fc2) have no product and never match.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import match_value, register_pattern

aten = torch.ops.aten
mojo = torch.ops.mojo

ACTIVATIONS = {
    "silu": F.silu,
    "gelu_tanh": lambda g: F.gelu(g, approximate="tanh"),
    "gelu": F.gelu,
}
TELL_TALES = ()  # an activation without a product is a non-gated MLP, not a missed site


def _same_float_operands(match) -> bool:
    gate, up = match_value(match, "gate"), match_value(match, "up")
    return (gate is not None and up is not None and gate.dtype.is_floating_point and gate.dim() > 0
            and gate.shape == up.shape and gate.dtype == up.dtype)


def _splittable(match) -> bool:
    gate_up = match_value(match, "gate_up")
    return (gate_up is not None and gate_up.dtype.is_floating_point and gate_up.dim() > 0
            and gate_up.shape[-1] % 2 == 0)


def _examples(*shapes):
    return [tuple(torch.randn(*s, dtype=torch.bfloat16) for s in shapes)]


def register_activation(name: str, act) -> None:
    # M1, both operand orders (the product is commutative bit for bit)
    register_pattern(f"gated_act.{name}", lambda gate, up: act(gate) * up,
                     lambda gate, up: mojo.gated_act(gate, up, name), _examples((2, 3, 8), (2, 3, 8)),
                     extra_check=_same_float_operands, family="gated_act", lazy=True)
    register_pattern(f"gated_act.{name}.up_first", lambda gate, up: up * act(gate),
                     lambda gate, up: mojo.gated_act(gate, up, name), _examples((2, 3, 8), (2, 3, 8)),
                     extra_check=_same_float_operands, family="gated_act", lazy=True)

    # M2: one fused projection split in halves; gate first (Phi3, GLM) or second (moonshine); either operand order
    for gate_first in (True, False):
        for up_first in (False, True):
            suffix = ("" if gate_first else ".gate_second") + (".up_first" if up_first else "")
            register_pattern(f"gated_act_fused.{name}{suffix}", *_fused(name, act, gate_first, up_first),
                             _examples((2, 3, 16)), extra_check=_splittable, priority=1, family="gated_act",
                             lazy=True)


def _fused(name, act, gate_first, up_first):
    def search(gate_up):
        first, second = gate_up.chunk(2, dim=-1)
        gate, up = (first, second) if gate_first else (second, first)
        return up * act(gate) if up_first else act(gate) * up

    def replace(gate_up):
        return mojo.gated_act_fused(gate_up, name, gate_first)

    return search, replace


for _name, _act in ACTIVATIONS.items():
    register_activation(_name, _act)
