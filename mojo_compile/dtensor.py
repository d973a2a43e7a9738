"""Graphs of DTensors (tensor and sequence parallelism, `parallelize_module`): traced and rewritten in the global view.

A DTensor op computes what the same op computes on the whole (global) tensor; the collectives it issues are how,
not what. So the pre-dispatch trace, which does not take tensor subclasses, runs on plain fake tensors of the
DTensor inputs' global shapes, and the patterns see the model's math. Three calls change what a value is rather
than compute on it:

    DTensor.from_local(shard, mesh, placements)   a rank's shard becomes the global tensor (its shape changes)
    dtensor.to_local()                            the reverse: the rank's shard, a plain tensor
    dtensor.redistribute(...), .full_tensor()     the same values in another layout (or whole, plain)

Each is traced as an opaque `mojo_dtensor::boundary` node with the shape, strides and dtype Dynamo recorded for its
output, so no pattern matches across it, and is put back as it was after the rewrite. At run time each Mojo op meets
what the original ops met: DTensors, through the sharding it declares (sharding.py: norms on token shards), or the
plain shards a `to_local` made (RoPE and attention on a rank's heads under tensor parallelism).

A graph with any other DTensor-specific call (a collective, a placement read, a DTensor made otherwise) is not
rewritten: `unsupported` says which call, and the backend hands the graph on as Dynamo gave it.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch.fx import Graph, GraphModule, Node

BOUNDARY_METHODS = frozenset({"to_local", "redistribute", "full_tensor"})


def _dtensor_type():
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # a torch without distributed
        return None
    return DTensor


def is_dtensor(x) -> bool:
    DTensor = _dtensor_type()
    return DTensor is not None and isinstance(x, DTensor)


def in_graph(gm: GraphModule, example_inputs: Sequence) -> bool:
    """Whether the graph computes on DTensors: a DTensor input, or one made inside (a boundary call, or any node
    whose value Dynamo recorded as a DTensor: `parallelize_module`'s input hooks compile to graphs of plain inputs
    that return `DTensor.from_local(...)`)."""
    if _dtensor_type() is None:
        return False
    return any(is_dtensor(x) for x in example_inputs) or any(
        is_boundary(node) or is_dtensor(node.meta.get("example_value")) for node in gm.graph.nodes)


def _is_from_local(target) -> bool:
    DTensor = _dtensor_type()
    return DTensor is not None and target in (DTensor.from_local, getattr(DTensor.from_local, "__func__", None))


# Dynamo (torch 2.11, and 2.13 for some spellings) puts these calls in the graph as closures over their constant
# arguments, named after the call: `prim from_local`, `prim_to_local`, `prim_redistribute`.
DYNAMO_CLOSURES = frozenset({"prim from_local", "prim_to_local", "prim_redistribute", "prim_full_tensor"})


def _is_dynamo_closure(target) -> bool:
    return callable(target) and getattr(target, "__name__", None) in DYNAMO_CLOSURES


def is_boundary(node: Node) -> bool:
    return (node.op == "call_method" and node.target in BOUNDARY_METHODS) or \
        (node.op == "call_function" and (_is_from_local(node.target) or _is_dynamo_closure(node.target)))


def unsupported(gm: GraphModule) -> Optional[str]:
    """Why the graph cannot be traced in the global view (None: it can): a DTensor-specific call other than the
    boundaries, or a boundary whose output Dynamo did not record, or one fed by a computed non-tensor."""
    placeholders = set(gm.graph.find_nodes(op="placeholder"))
    for node in gm.graph.nodes:
        if is_boundary(node):
            value = node.meta.get("example_value")
            if not isinstance(value, torch.Tensor) or \
                    any(not isinstance(s, int) for s in (*value.shape, *value.stride())):
                return f"{node.format_node()}: no static example value"
            rest = [a for a in (*node.args[1:], *node.kwargs.values()) if isinstance(a, Node)]
            if not isinstance(node.args[0], Node) or any(a not in placeholders for a in rest):
                return f"{node.format_node()}: an argument computed in the graph"
        elif node.op == "call_method" and not hasattr(torch.Tensor, node.target):
            return f"{node.format_node()}: a method of DTensor only"
        elif node.op == "call_function" and (getattr(node.target, "__module__", None) or "").startswith(
                "torch.distributed"):
            return f"{node.format_node()}: a torch.distributed call"
        elif node.op == "call_function" and str(getattr(node.target, "__name__", "")).startswith("prim"):
            return f"{node.format_node()}: a call Dynamo made of a DTensor method"
    return None


def global_inputs(example_inputs: Sequence, fake_mode) -> list:
    """The inputs for the global-view trace: each DTensor a plain fake tensor of its global shape, strides and dtype."""
    out = []
    for x in example_inputs:
        if is_dtensor(x):
            with fake_mode:
                plain = torch.empty_strided(tuple(x.shape), tuple(x.stride()), dtype=x.dtype, device=x.device)
            out.append(plain.requires_grad_(x.requires_grad))
        else:
            out.append(x)
    return out


@torch.library.custom_op("mojo_dtensor::boundary", mutates_args=())
def boundary(x: torch.Tensor, index: int, size: Sequence[int], stride: Sequence[int],
             dtype: torch.dtype) -> torch.Tensor:
    raise RuntimeError("mojo_dtensor::boundary stands in for a DTensor call while tracing and never runs")


@boundary.register_fake
def _(x, index, size, stride, dtype):
    return x.new_empty_strided(size, stride, dtype=dtype)


class GlobalView(torch.fx.Interpreter):
    """Runs Dynamo's graph with each boundary call replaced by a `boundary` node (under make_fx: traced)."""

    def __init__(self, gm: GraphModule):
        super().__init__(gm)
        self.index = {node: i for i, node in enumerate(gm.graph.nodes)}

    def run_node(self, node: Node):
        if not is_boundary(node):
            return super().run_node(node)
        with self._set_current_node(node):
            value = node.meta["example_value"]
            return boundary(self.env[node.args[0]], self.index[node], list(value.shape), list(value.stride()),
                            value.dtype)


DTENSOR_VALUE = "mojo_dtensor_value"  # node.meta flag: the node's value is a DTensor at run time


def mark_values(dynamo_gm: GraphModule, aten_gm: GraphModule, example_inputs: Sequence) -> None:
    """Flag each node of the global-view trace whose value is a DTensor at run time, as DTensor dispatch decides it:
    a DTensor input, a boundary whose output Dynamo recorded as one (from_local, redistribute; not to_local), and any
    op with a DTensor among its inputs. A Mojo op takes DTensors only through the sharding its module declares, and
    none takes a DTensor beside a plain tensor: patterns ask `is_dtensor_value` (the loss on vocabulary shards under
    `loss_parallel()`, whose labels are plain, is DTensor's own)."""
    dynamo_nodes = list(dynamo_gm.graph.nodes)
    for node, value in zip(aten_gm.graph.find_nodes(op="placeholder"), example_inputs):
        if is_dtensor(value):
            node.meta[DTENSOR_VALUE] = True
    for node in aten_gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is torch.ops.mojo_dtensor.boundary.default:
            made = is_dtensor(dynamo_nodes[node.args[1]].meta.get("example_value"))
        else:
            made = any(arg.meta.get(DTENSOR_VALUE) for arg in node.all_input_nodes)
        if made:
            node.meta[DTENSOR_VALUE] = True


def is_dtensor_value(node) -> bool:
    """Whether `node` (a graph node; anything else: False) computes a DTensor at run time (`mark_values`)."""
    return isinstance(node, Node) and bool(node.meta.get(DTENSOR_VALUE))


def restore_boundaries(dynamo_gm: GraphModule, aten_gm: GraphModule) -> None:
    """Put each boundary's DTensor call back, reading the traced input and the same graph inputs (the mesh)."""
    dynamo_nodes = list(dynamo_gm.graph.nodes)
    to_aten = dict(zip(dynamo_gm.graph.find_nodes(op="placeholder"), aten_gm.graph.find_nodes(op="placeholder")))
    graph: Graph = aten_gm.graph
    boundaries = list(graph.find_nodes(op="call_function", target=torch.ops.mojo_dtensor.boundary.default))
    if not boundaries:
        return
    for node in boundaries:
        original = dynamo_nodes[node.args[1]]

        args = (node.args[0], *torch.fx.node.map_arg(original.args[1:], lambda a: to_aten[a]))
        kwargs = torch.fx.node.map_arg(original.kwargs, lambda a: to_aten[a])
        with graph.inserting_before(node):
            call = graph.create_node(original.op, original.target, args, kwargs)
        call.meta.update({k: v for k, v in node.meta.items() if k != "mojo_pattern"})
        node.replace_all_uses_with(call)
        graph.erase_node(node)
    aten_gm.recompile()
