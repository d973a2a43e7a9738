"""Gated MLP activations -> `mojo::gated_act` / `mojo::gated_act_fused` (docs/hf-spellings.md, M1-M2).

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

from . import match_value, refuse, register_pattern

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
    if gate is None or up is None:
        return refuse("gate or up has no tensor value")
    if not gate.dtype.is_floating_point or gate.dim() == 0:
        return refuse(f"gate is a {gate.dtype} {gate.dim()}-D tensor, not a float tensor")
    if gate.shape != up.shape:
        return refuse(f"gate {list(gate.shape)} and up {list(up.shape)} differ in shape (a broadcast product)")
    if gate.dtype != up.dtype:
        return refuse(f"gate is {gate.dtype} and up {up.dtype} (a promoting product)")
    return True


def _splittable(match) -> bool:
    gate_up = match_value(match, "gate_up")
    if gate_up is None:
        return refuse("gate_up has no tensor value")
    if not gate_up.dtype.is_floating_point or gate_up.dim() == 0:
        return refuse(f"gate_up is a {gate_up.dtype} {gate_up.dim()}-D tensor, not a float tensor")
    if gate_up.shape[-1] % 2 != 0:
        return refuse(f"gate_up's last dim {gate_up.shape[-1]} is odd: no two halves")
    return True


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
