"""The backward in pieces: a training graph compiled as a chain of graphs, so that parameter gradients reach
`.grad` while the backward is still running.

Why: AOTAutograd compiles one graph into one autograd node, whose backward returns every parameter gradient of
the graph together, at its end. So just before it returns, all of the step's new gradients are alive at once
beside the accumulated `.grad`s: for a model whose gradients are several GiB, that is the step's memory peak
(eager's autograd adds each gradient into `.grad` as it is made and frees it). Compiled as pieces, each piece is
its own autograd node: its backward returns only its parameters' gradients, autograd accumulates them into `.grad`
and frees them, and only then does the next piece's backward run.

How: the rewritten ATen graph's nodes are dealt out in order to pieces of about `backward_piece_mb` MiB of gradients
each (an input that requires grad is counted at its first use), cut only where no autocast or grad-mode region is
open, and where the fewest bytes of values cross from one piece to the next (a value crossing a cut may be saved for
the backward by both pieces). `torch.fx.passes.split_module` makes the pieces; each is compiled by the inner
compiler on example inputs made by running the pieces before it on fake tensors, as Dynamo's DDPOptimizer compiles
the buckets it splits a graph into. A graph with less than two pieces' worth of gradients, or compiled without grad,
or for CUDA graphs (one graph per step is their point) stays whole.

What it costs: a piece boundary is a fusion boundary for the inner compiler (in a transformer the cuts fall on
the residual stream, between a layer's attention and its MLP or between layers: little fuses across there), and
one more autograd node and Python call per piece.
"""
from __future__ import annotations

import logging
from contextlib import nullcontext
from typing import Any, Callable, Optional

import torch
from torch.fx import GraphModule, Node

from .canonicalize import value_storage

log = logging.getLogger("mojo_compile")

DEFAULT_PIECE_MB = 256.0


def _region_change(node: Node) -> tuple[int, Optional[bool]]:
    """(change of the autocast nesting depth, grad mode set) by this node, for the graph-level state ops make_fx
    records in a pre-dispatch graph."""
    if node.op != "call_function":
        return 0, None
    target = node.target
    name = getattr(target, "__name__", "")
    if name == "_enter_autocast":
        return 1, None
    if name == "_exit_autocast":
        return -1, None
    if target is torch._C._set_grad_enabled:
        return 0, bool(node.args[0])
    return 0, None


def _first_uses(gm: GraphModule, grad_inputs: dict, order: dict[Node, int]) -> dict[Node, int]:
    """For each node, the bytes of gradient-taking inputs it is the first user of."""
    charged: dict[Node, int] = {}
    for placeholder, nbytes in grad_inputs.items():
        users = [u for u in placeholder.users if u.op != "output"]
        if users:
            first = min(users, key=order.__getitem__)
            charged[first] = charged.get(first, 0) + nbytes
    return charged


def _example_int(size) -> int:
    """A size's value in the example inputs, without the guard int() would put on a symbolic one (a guard
    specialises the graph to that size); an unbacked size counts as 0."""
    if isinstance(size, int):
        return size
    hint = getattr(size.node, "hint", None)
    return int(hint) if hint is not None else 0


def _blocked(gm: GraphModule, order: dict[Node, int]) -> list[bool]:
    """blocked[i]: no cut before node i, because a tensor that exists before it (an intermediate made there, a
    graph input read there, or anything sharing its storage: views, and ops that return their input or a view of
    it without saying so in their schema, e.g. broadcast_tensors, atleast_2d) is written in place at or after it.
    Cut there, a later piece would write what an earlier piece made or saved: AOTAutograd writes it back after the
    piece's autograd node and the earlier piece's saved values see a changed version (an error in the backward),
    or a view reaches the later piece without its base. Storage identity is read off the traced values."""
    from .canonicalize import written_by

    first_seen: dict = {}
    for node in gm.graph.nodes:
        storage = value_storage(node.meta.get("val"))
        if storage is None:
            continue
        seen = min((order[u] for u in node.users), default=order[node]) if node.op == "placeholder" else order[node]
        first_seen[storage] = min(first_seen.get(storage, seen), seen)
    spans = [0] * (len(order) + 1)  # +1 where a blocked span opens, -1 past where it closes: one pass, not N x span
    for node in gm.graph.nodes:
        for written in written_by(node):
            storage = value_storage(written.meta.get("val"))
            start = first_seen.get(storage, order[written]) if storage is not None else order[written]
            if start < order[node]:
                spans[start + 1] += 1
                spans[order[node] + 1] -= 1
    blocked, open_spans = [], 0
    for change in spans[:-1]:
        open_spans += change
        blocked.append(open_spans > 0)
    return blocked


def _crossing_bytes(gm: GraphModule, order: dict[Node, int]) -> list[int]:
    """crossing[i]: the bytes of the values made before node i and read at or after it, each storage counted once
    (views share their base's). A cut before node i hands these from one piece to the next, and the next piece
    saves those its backward needs a second time, beside what the first piece saved to make them: a cut between
    a SwiGLU's gate and its down projection keeps a [tokens, intermediate] tensor alive that the activation's
    recompute would not. Graph inputs are alive wherever the cuts are: not counted; nor is the output node's read of
    a returned value (a returned value read again later in the graph does count, up to that read)."""
    inputs = {value_storage(p.meta.get("val")) for p in gm.graph.find_nodes(op="placeholder")}
    spans: dict = {}  # storage -> [made at, last read at, bytes]
    for node in gm.graph.nodes:
        value = node.meta.get("val")
        storage = value_storage(value)
        if node.op in ("placeholder", "output") or storage is None or storage in inputs:
            continue
        last = max((order[u] for u in node.users if u.op != "output"), default=order[node])
        nbytes = _example_int(value.numel()) * value.element_size()
        span = spans.setdefault(storage, [order[node], last, nbytes])
        span[1], span[2] = max(span[1], last), max(span[2], nbytes)
    delta = [0] * (len(order) + 1)
    for made, last, nbytes in spans.values():
        if last > made:
            delta[made + 1] += nbytes
            delta[last + 1] -= nbytes
    crossing, total = [], 0
    for change in delta[:-1]:
        total += change
        crossing.append(total)
    return crossing


def plan(gm: GraphModule, example_inputs: list, piece_mb: float) -> Optional[dict[Node, int]]:
    """The piece of each call node, in graph order (non-decreasing), or None where the graph stays whole.

    A cut may fall before a node that is the first to use a gradient-taking input, outside autocast and no-grad
    regions and where no in-place write spans it. Once a piece holds `piece_mb` of gradients, the cut is the one
    handing the fewest bytes to the next piece (`_crossing_bytes`) among the candidates in the next `piece_mb`
    (the earliest of equals): in a transformer a layer's residual stream, not the inside of its MLP. A parameter
    that fills a piece alone (an LM head) starts a piece of its own, so its gradient leaves with its own piece's
    backward, the first to run, rather than being held through the layers'."""
    if piece_mb <= 0 or not torch.is_grad_enabled():
        return None
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    grad_inputs = {}
    for node, value in zip(placeholders, example_inputs):
        if isinstance(value, torch.Tensor) and value.requires_grad:
            grad_inputs[node] = _example_int(value.numel()) * value.element_size()
    piece_bytes = piece_mb * 2 ** 20
    if sum(grad_inputs.values()) < 2 * piece_bytes:
        return None
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    charged = _first_uses(gm, grad_inputs, order)
    blocked = _blocked(gm, order)
    candidates = []  # (node, gradient bytes before it, its own), where a cut may fall
    before, depth, grad_on = 0, 0, True
    for node in gm.graph.nodes:
        first = charged.get(node, 0)
        if first and depth == 0 and grad_on and not blocked[order[node]]:
            candidates.append((node, before, first))
        before += first
        change, grad = _region_change(node)
        depth += change
        grad_on = grad if grad is not None else grad_on
    crossing = _crossing_bytes(gm, order)
    cuts, start, i = [], 0, 0
    while i < len(candidates):
        node, at, first = candidates[i]
        if first >= piece_bytes and at > start:
            cuts.append(node)
            start = at
        elif at - start >= piece_bytes:
            window = [i]  # up to one more piece's worth, and not past a parameter that needs its own piece
            for j in range(i + 1, len(candidates)):
                if candidates[j][1] - at >= piece_bytes or candidates[j][2] >= piece_bytes:
                    break
                window.append(j)
            i = min(window, key=lambda j: (crossing[order[candidates[j][0]]], j))
            cuts.append(candidates[i][0])
            start = candidates[i][1]
        i += 1
    if not cuts:
        return None
    assignment, piece, cut_at = {}, 0, set(cuts)
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        piece += node in cut_at
        assignment[node] = piece
    return assignment


class _Piece(torch.nn.Module):
    """A compiled piece behind the call_module node of its uncompiled original; the inner compiler takes graphs
    returning a tuple, the split graph may expect the lone value."""

    def __init__(self, compiled: Callable, unwrap: bool):
        super().__init__()
        self.compiled = compiled
        self.unwrap = unwrap

    def forward(self, *args):
        out = self.compiled(*args)
        return out[0] if self.unwrap and isinstance(out, (tuple, list)) else out


def _output_storages(gm: GraphModule) -> set:
    """The storages of what the graph returns, by its traced values."""
    output = next(iter(gm.graph.find_nodes(op="output")))
    found = set()
    torch.fx.map_arg(output.args, lambda n: found.add(value_storage(n.meta.get("val"))))
    found.discard(None)
    return found


class _CompileEach(torch.fx.Interpreter):
    """Runs the split graph on fake inputs; each piece is compiled on the fake values that reach it, then run
    uncompiled on them to make the next pieces' example inputs (compiled first: the run applies the piece's
    in-place changes to those values, which the compiler must see as they were)."""

    def __init__(self, split: GraphModule, compile_piece: Callable, fake_mode, escaping: set):
        super().__init__(split)
        self.compile_piece = compile_piece
        self.fake_mode = fake_mode
        self.escaping = escaping

    def get_attr(self, target: str, args: tuple, kwargs: dict) -> Any:
        """A constant the graph made (a get_attr split_module turned into a piece's input): fake, with its sizes
        static, as Dynamo's own constants are (a fresh symbolic size would have no source to guard)."""
        value = super().get_attr(target, args, kwargs)
        if isinstance(value, torch.Tensor) and not isinstance(value, torch._subclasses.FakeTensor):
            value = self.fake_mode.from_tensor(value, static_shapes=True)
        return value

    def call_module(self, target: str, args: tuple, kwargs: dict) -> Any:
        assert not kwargs, "split_module passes a piece's inputs positionally"
        original: GraphModule = self.fetch_attr(target)
        graph = torch.fx.Graph()
        result = graph.graph_copy(original.graph, {})  # the piece's nodes (meta shared), its output left out
        unwrap = not isinstance(result, (tuple, list))
        graph.output((result,) if unwrap else result)  # the inner compiler takes graphs returning a tuple
        # Inductor may reuse a saved tensor's buffer in the backward ("donated buffers": AOTAutograd's
        # functorch.config.donated_buffer). A piece's input that the whole graph also returns (or a view of it)
        # must not be: the caller's tensor would change under the backward. Whole, the graph knows its outputs;
        # a piece does not, so where such an input reaches it, it donates nothing.
        inputs_escape = any(value_storage(p.meta.get("val")) in self.escaping
                            for p in original.graph.find_nodes(op="placeholder"))
        with torch._functorch.config.patch(donated_buffer=False) if inputs_escape else nullcontext():
            compiled = self.compile_piece(GraphModule(original, graph), list(args))
        setattr(self.module, target, _Piece(compiled, unwrap))
        shape_env = self.fake_mode.shape_env
        ignore_unbacked = shape_env.ignore_fresh_unbacked_symbols() if shape_env is not None else nullcontext()
        with self.fake_mode, ignore_unbacked:  # data-dependent sizes: the compile above bound them already
            return original(*args)


def compile_in_pieces(gm: GraphModule, example_inputs: list, assignment: dict[Node, int],
                      compile_piece: Callable, fake_mode) -> GraphModule:
    """The split graph, each piece replaced by what `compile_piece(piece_gm, fake_inputs)` returns."""
    from torch.fx.passes.split_module import split_module
    from torch._subclasses.fake_tensor import FakeTensor

    for node in gm.graph.nodes:  # split_module reads symbolic sizes from Dynamo's key, make_fx writes "val":
        if "val" in node.meta and "example_value" not in node.meta:  # a piece then takes the symbols its
            node.meta["example_value"] = node.meta["val"]  # inputs' sizes need as inputs of their own
    split = split_module(gm, gm, lambda node: assignment[node], keep_original_order=True)
    with fake_mode:
        fake_inputs = [x if not isinstance(x, torch.Tensor) or isinstance(x, FakeTensor)
                       else fake_mode.from_tensor(x) for x in example_inputs]
    _CompileEach(split, compile_piece, fake_mode, _output_storages(gm)).run(*fake_inputs)
    split.recompile()
    pieces = sum(1 for n in split.graph.nodes if n.op == "call_module")
    log.info("mojo: the graph compiled in %d pieces (backward_piece_mb)", pieces)
    split.mojo_pieces = pieces
    return split

