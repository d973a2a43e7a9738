"""Decode GEMVs -> `mojo::linear`, `mojo::gated_linear`, `mojo::linear2` / `mojo::linear3` (ops/linear.py; issue 15).

A bias-free projection of x with at most 4 rows (the product of x's leading dims: batch <= 4 of one token each, a
decode step) becomes one GEMV op; more rows (a prefill) is a GEMM and stays cuBLAS's (refused with that reason).
In the pre-dispatch ATen graph a bias-free projection is spelled

    linear      `aten.linear(x, w)`         nn.Linear(bias=False), F.linear(x, w) (HF's q/k/v/o, MLP and LM head)
    matmul      `aten.matmul(x, aten.t(w))` x @ w.t(), x @ w.T, torch.matmul(x, w.t())
    mm          `aten.mm(x, aten.t(w))`     torch.mm(x, w.t()) on a 2-D x

and each spelling is one pattern. A linear with a bias (`aten.linear(x, w, b)`, `F.linear(x, w, b)`) has a third
argument and matches none (eager's addmm stays). Both inputs must be float tensors of one dtype, w 2-D, the row count
static and 1..4, no gradient wanted (the ops have no backward: `needs_grad` of x or w refuses; decoding runs under
torch.no_grad()), and no autocast region of another dtype than x's in force (ambient, or entered in the graph): eager
projects in autocast's dtype there, the ops in x's. DTensors (tensor parallel) are refused: the ops declare no
sharding, DTensor's matmul keeps its layouts.

The gated MLP of a decode step, `act(gate_proj(x)) * up_proj(x)`, is first fused by the gated_act family into
`mojo.gated_act(linear(x, Wg), linear(x, Wu), act)` (priority 0); `gated_linear.<act>[.<spelling>]` (priority -5)
takes that op with its two projections of the same x into one `mojo.gated_linear` (both weights read in one pass).
Gate and up computed from different x (two nodes) do not match it: each projection is then a `mojo.linear`. The
single-projection patterns run after it (priority -20), and after linear_cross_entropy (2), which keeps an LM head
that feeds the loss.

Last, a graph pass (`linear.group`, the hook `register_graph_pass`) puts 2 or 3 `mojo.linear` nodes that read the same
x with weights of one dtype and device into one `mojo.linear2` / `mojo.linear3` (q, k and v: one launch). A pattern
cannot: Inductor's multi-output matcher binds every projection of the pattern to one node. The pass takes a node
only where moving it to the group's first node changes nothing: its weight is computed before that node, it does
not read another member's output (no data dependency), and nothing between them writes x or a weight in place (nor
any op the pass cannot see into): a write is read off the schema, written lists (`_foreach_mul_`) included, and it
aliases x or a weight where their view chains or their traced values' storages meet (graph inputs that are views of
one another).
"""
from __future__ import annotations

import collections
import operator

import torch
import torch.nn.functional as F
from torch.fx import Node

from ..lowering.reference import ACTIVATIONS
from ..ops.linear import MAX_ROWS, rows
from . import (autocast_reason, dtensor_reason, match_value, needs_grad, refuse, register_graph_pass,
               register_pattern)

aten = torch.ops.aten
mojo = torch.ops.mojo

SPELLINGS = ("linear", "matmul", "mm")
GATED_PRIORITY = -5  # after gated_act (0), which makes the mojo.gated_act this pattern reads
LINEAR_PRIORITY = -20  # after every pattern that may read a projection: the LM head with the loss (2), gated_linear


def _project(spelling: str, x, w):
    if spelling == "linear":
        return F.linear(x, w)
    if spelling == "matmul":
        return torch.matmul(x, w.t())
    return torch.mm(x, w.t())


def _rows_reason(x) -> str | None:
    m = rows(x)
    if not isinstance(m, int):
        return f"x {list(x.shape)}: the number of rows is symbolic (the GEMV takes a static 1..{MAX_ROWS})"
    if not 1 <= m <= MAX_ROWS:
        return f"x has {m} rows: a GEMM (prefill), left to cuBLAS (the GEMV takes 1..{MAX_ROWS})"
    return None


def _projection_reason(match, x_name: str, weight_names) -> str | None:
    """Why x @ w.T for the bound x and weights is not a decode GEMV the ops model, or None."""
    x = match_value(match, x_name)
    if x is None:
        return "x has no tensor value"
    if not x.dtype.is_floating_point or x.dim() == 0:
        return f"x is a {x.dtype} {x.dim()}-D tensor, not a float tensor"
    for name in weight_names:
        w = match_value(match, name)
        if w is None:
            return f"{name} has no tensor value"
        if w.dim() != 2:
            return f"{name} is {w.dim()}-D, not [N, K]"
        if w.dtype != x.dtype:
            return f"{name} is {w.dtype}, x is {x.dtype}"
        if w.shape[1] != x.shape[-1]:
            return f"{name} {list(w.shape)} does not take x's last dim {x.shape[-1]}"
    reason = _rows_reason(x) or autocast_reason(
        match, x, f"eager projects x ({x.dtype}) in that dtype, the GEMV ops in x's")
    if reason:
        return reason
    for name in (x_name, *weight_names):
        if needs_grad(match.kwargs.get(name)):
            return f"{name} may need a gradient (the decode GEMV ops have no backward)"
    return dtensor_reason(match, (x_name, *weight_names), "the GEMV ops")


def _linear_check(match) -> bool:
    reason = _projection_reason(match, "x", ("weight",))
    return refuse(reason) if reason else True


def _gated_act_node(match):
    return next((n for n in match.nodes if n.op == "call_function" and n.target is mojo.gated_act.default), None)


def _gated_check(act: str):
    def check(match) -> bool:
        node = _gated_act_node(match)
        if node is None:
            return refuse("no mojo.gated_act in the match")
        bound = node.args[2] if len(node.args) > 2 else node.kwargs.get("act", "silu")
        if bound != act:
            return refuse(f"the activation is {bound!r}, the pattern's {act!r}")
        reason = _projection_reason(match, "x", ("gate_weight", "up_weight"))
        if reason:
            return refuse(reason)
        if match_value(match, "gate_weight").shape != match_value(match, "up_weight").shape:
            return refuse("the gate and up weights differ in shape")
        return True
    check.__name__ = f"gated_linear_check_{act}"
    return check


def _examples(x_shape, *weight_shapes):
    return [tuple(torch.randn(*s, dtype=torch.bfloat16) for s in (x_shape, *weight_shapes))]


def _x_shape(spelling: str):
    return (3, 8) if spelling == "mm" else (1, 3, 8)


def _linear_pattern(spelling: str):
    def search(x, weight):
        return _project(spelling, x, weight)

    def replace(x, weight):
        return mojo.linear(x, weight)
    return search, replace


def _gated_pattern(spelling: str, act: str):
    def search(x, gate_weight, up_weight):
        return mojo.gated_act(_project(spelling, x, gate_weight), _project(spelling, x, up_weight), act)

    def replace(x, gate_weight, up_weight):
        return mojo.gated_linear(x, gate_weight, up_weight, act)
    return search, replace


for _spelling in SPELLINGS:
    _suffix = "" if _spelling == "linear" else f".{_spelling}"
    register_pattern(f"linear{_suffix}", *_linear_pattern(_spelling), _examples(_x_shape(_spelling), (5, 8)),
                     extra_check=_linear_check, priority=LINEAR_PRIORITY, family="linear", lazy=True)
    for _act in ACTIVATIONS:
        register_pattern(f"gated_linear.{_act}{_suffix}", *_gated_pattern(_spelling, _act),
                         _examples(_x_shape(_spelling), (6, 8), (6, 8)), extra_check=_gated_check(_act),
                         priority=GATED_PRIORITY, family="linear", lazy=True)


# ------------------------------------------------------------------------------------------------ linear.group
_FUSED = {2: mojo.linear2.default, 3: mojo.linear3.default}
_HARMLESS = {operator.getitem, torch._C._set_grad_enabled}  # calls without a schema that write no tensor


def _groupable(node: Node) -> bool:
    if node.op != "call_function" or node.target is not mojo.linear.default or len(node.args) != 2:
        return False
    if any(k != "target" for k in node.kwargs):
        return False
    return all(isinstance(a, Node) and isinstance(a.meta.get("val"), torch.Tensor) for a in node.args)


def _ancestors(node: Node, stop: int, order: dict) -> set:
    """The nodes `node` reads, transitively, back to position `stop` (nothing earlier can be a later node's)."""
    seen, stack = set(), list(node.all_input_nodes)
    while stack:
        n = stack.pop()
        if n in seen or order[n] < stop:
            continue
        seen.add(n)
        stack.extend(n.all_input_nodes)
    return seen


def _barrier_between(first: Node, node: Node, roots: set, nodes: list, order: dict) -> bool:
    """Whether a node strictly between `first` and `node` writes in place a tensor aliasing one of `roots` -- by the
    view chain, or by the traced values' storages (graph inputs that are views of one another; a view op that
    declares no alias) -- or is a call the pass cannot see into (no schema): moving `node` up to `first` could then
    change what it reads."""
    from ..canonicalize import storage_of, written_by
    from . import _alias_root

    storages = {storage_of(r) for r in roots} - {None}
    for n in nodes[order[first] + 1:order[node]]:
        if n.op != "call_function":
            continue
        if getattr(n.target, "_schema", None) is None:
            if n.target not in _HARMLESS:
                return True
            continue
        for w in written_by(n):
            if _alias_root(w) in roots or storage_of(w) in storages:
                return True
    return False


def _groups(gm) -> list[list[Node]]:
    from . import _alias_root

    nodes = list(gm.graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    by_x = collections.defaultdict(list)
    for node in nodes:
        if _groupable(node):
            by_x[node.args[0]].append(node)
    groups = []
    for x, members in by_x.items():
        if len(members) < 2:
            continue
        first, group = members[0], [members[0]]
        x_val, w_val = x.meta["val"], first.args[1].meta["val"]
        roots = {_alias_root(x), _alias_root(first.args[1])}
        for node in members[1:]:
            weight = node.args[1]
            w = weight.meta["val"]
            if w.dtype != w_val.dtype or w.device != w_val.device or w.dim() != 2 or w.shape[1] != x_val.shape[-1]:
                continue
            if order[weight] >= order[first]:
                continue  # computed after the group's first node: the fused op goes there
            if any(m in _ancestors(node, order[first], order) for m in group):
                continue
            if _barrier_between(first, node, roots | {_alias_root(weight)}, nodes, order):
                continue
            group.append(node)
            roots.add(_alias_root(weight))
        for start in range(0, len(group), 3):
            chunk = group[start:start + 3]
            if len(chunk) >= 2:
                groups.append(chunk)
    return groups


def _common_module_stack(chunk):
    stacks = [n.meta.get("nn_module_stack") for n in chunk]
    if not all(stacks):
        return stacks[0]
    return {k: v for k, v in stacks[0].items() if all(k in s for s in stacks[1:])} or stacks[0]


def group_linears(gm) -> list[Node]:
    """The graph pass `linear.group`: 2 or 3 `mojo.linear` of one x -> one `mojo.linear2` / `mojo.linear3` at the
    first one's place (module docstring). Returns the new op nodes."""
    graph = gm.graph
    added = []
    for chunk in _groups(gm):
        x = chunk[0].args[0]
        with graph.inserting_before(chunk[0]):
            fused = graph.call_function(_FUSED[len(chunk)], (x, *(n.args[1] for n in chunk)))
            outs = [graph.call_function(operator.getitem, (fused, i)) for i in range(len(chunk))]
        fused.meta["val"] = tuple(n.meta["val"] for n in chunk)
        stack = _common_module_stack(chunk)
        if stack:
            fused.meta["nn_module_stack"] = stack
        for key in ("stack_trace", "seq_nr"):
            if key in chunk[0].meta:
                fused.meta[key] = chunk[0].meta[key]
        for out, node in zip(outs, chunk):
            out.meta.update({k: v for k, v in node.meta.items() if k != "mojo_pattern"})
            node.replace_all_uses_with(out)
            graph.erase_node(node)
        added.append(fused)
    return added


register_graph_pass("linear.group", group_linears, family="linear")
