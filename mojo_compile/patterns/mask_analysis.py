"""The mask analysis pass: after the attention rewrite, each `mojo::attention` op's mask subgraph is examined, and
where it is proven to be causal (bottom-right aligned), causal with a sliding window, or -- for a bool mask -- also
`attention_mask[b, j] != 0` (key padding), the op gets that structure instead of the tensor.

A mask that depends on no runtime input (what HF builds for a prefill from aranges, position ids derived from
them, the packed-sequence check, the sliding-window overlay) is a function of the sizes alone. Static sizes: it is
a constant of the compiled graph, evaluated once and classified (`classify`). Symbolic sizes, or runtime inputs
among its inputs (the user's attention_mask, a StaticCache's cache_position): it is evaluated as a formula of its
indices (mask_algebra.py, each runtime tensor an uninterpreted function of its own) and the formula compared.
A mask `key j <= P(i)` whose query positions P are runtime data (HF's StaticCache masks: key j is allowed for the
query at cache_position[i], and Skv is the whole cache) becomes causal attention at those positions: the op's q_pos,
computed in the graph from the same tensors, so the kernels read only the keys up to the last position, not the
cache's unfilled tail. Anything else (an additive mask with padding or runtime positions, whose fully masked rows
eager makes uniform) keeps the tensor. Proven, never assumed.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional

import sympy
import torch
from sympy.core.function import AppliedUndef
from torch.fx import GraphModule, Node

from ..canonicalize import _touched_by_mutation
from ..tuner import real_tensors
from . import mask_algebra

log = logging.getLogger("mojo_compile")
aten = torch.ops.aten
mojo = torch.ops.mojo


@dataclass
class MaskStructure:
    causal: bool
    window: int = 0
    keys: Optional[Node] = None  # a runtime [B, Skv] tensor: key j of batch b is allowed iff keys[b, j] != 0
    positions: Optional[sympy.Basic] = None  # the query positions as a formula (mask_algebra.position_terms)

    def describe(self) -> str:
        kind = ("causal" if self.causal else "") + (f", window {self.window}" if self.window else "")
        if self.positions is not None:
            sources = sorted(f.func.__name__ for f in self.positions.atoms(AppliedUndef))
            if sources:
                kind += f" at the query positions from {', '.join(sources)}"
            else:  # the query index and integers: query i at position i + c of the keys (a prefill into a cache)
                kind += f" at the query positions ({self.positions.xreplace({mask_algebra.X(2): sympy.Symbol('i')})})"
        if self.keys is not None:
            kind = f"{kind} + key padding" if kind else "key padding"
        return kind or "none"


def _ancestors(node: Node) -> Optional[list[Node]]:
    """The nodes the mask is computed from, in graph order; None if any is a runtime input or has symbolic sizes."""
    seen, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "placeholder":
            return None  # depends on a runtime input (attention_mask, cache_position, a symbolic size)
        val = n.meta.get("val")
        for t in (val if isinstance(val, (tuple, list)) else [val]):
            if isinstance(t, torch.Tensor) and any(not isinstance(s, int) for s in t.shape):
                return None
        if n.op == "call_function" and _mutates(n) and n.target is not aten.detach_.default:
            return None  # (detach_ changes autograd metadata only: HF 5.17 detaches a lifted `torch.tensor(0.0)`)
        if n.op == "call_function" and _drawn_anew(n):
            return None  # a random draw (or uninitialised memory) has another value at every call
        stack.extend(n.all_input_nodes)
    order = {n: i for i, n in enumerate(node.graph.nodes)}
    return sorted(seen, key=order.__getitem__)


# Ops whose result is not a function of their arguments: uninitialised memory (the random ops carry the
# nondeterministic_seeded tag).
_UNINITIALISED = {aten.empty.memory_format, aten.empty_like.default, aten.new_empty.default,
                  aten.empty_strided.default, aten.new_empty_strided.default, aten.empty_permuted.default}


def _drawn_anew(node: Node) -> bool:
    """Whether node's value may differ between two calls with the same inputs: a random op (`torch.rand`,
    `bernoulli`: a mask drawn per call must not be evaluated once, at compile time) or an uninitialised tensor."""
    return node.target in _UNINITIALISED or torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ())


def _mutates(node: Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    return schema is not None and schema.is_mutable


def evaluate_constant(gm: GraphModule, node: Node) -> Optional[torch.Tensor]:
    """The value of `node` when it depends on no runtime input: its subgraph copied and run once."""
    nodes = _ancestors(node)
    if nodes is None or any(_touched_by_mutation(n) for n in nodes):
        return None  # (a tensor written in place later, `m[:, 0] = True`, has another value where it is read)
    graph = torch.fx.Graph()
    env: dict = {}
    for n in nodes:
        env[n] = graph.node_copy(n, lambda x: env[x])
    graph.output(env[node])
    try:
        with real_tensors():  # whatever mode the compiler is in, this runs for real (small: index arithmetic)
            return GraphModule(gm, graph)()
    except Exception as e:  # a subgraph we cannot run at compile time stays a tensor
        log.debug("mojo attention: mask subgraph not evaluable: %s", e)
        return None


def classify(mask: torch.Tensor, sq: int, skv: int) -> Optional[MaskStructure]:
    """The structure `mask` is exactly, for every batch and head: causal (bottom-right), causal + sliding window,
    or no mask at all; None if it is anything else (or a row is fully masked, which the structure cannot express).
    An empty mask (no query or no key) proves nothing worth a structure: it stays a tensor."""
    if mask.numel() == 0 or sq == 0 or skv == 0:
        return None
    if mask.dtype != torch.bool:
        values = mask.float().unique()
        if values.numel() > 2 or not ((values == 0) | (values <= -1e30)).all():
            return None  # an additive mask that is not 0 / a huge negative (finfo.min, -inf): a NaN too
        mask = mask == 0
    if mask.dim() > 4 or mask.shape[-2:] not in ((sq, skv), (1, skv), (sq, 1), (1, 1)):
        return None
    full = mask.expand(*mask.shape[:-2], sq, skv).reshape(-1, sq, skv)
    m = full[0]
    if not bool((full == m).all()):
        return None  # differs between batches or heads (padding): keep the tensor
    if bool(m.all()):
        return MaskStructure(causal=False)
    rows = torch.arange(skv - sq, skv, device=m.device)[:, None]
    cols = torch.arange(skv, device=m.device)[None, :]
    causal = cols <= rows
    if not bool(m.any(-1).all()):
        return None
    if torch.equal(m, causal):
        return MaskStructure(causal=True)
    window = int(m[-1].sum())  # the last row's allowed keys: the window
    if window > 0 and torch.equal(m, causal & (cols > rows - window)):
        return MaskStructure(causal=True, window=window)
    return None


def _arguments(node: Node) -> dict:
    """The op node's arguments by schema name, defaults filled in."""
    schema = node.target._schema
    values = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args):
            values[arg.name] = node.args[i]
        else:
            values[arg.name] = node.kwargs.get(arg.name, arg.default_value)
    return values


def _boolean_part(gm: GraphModule, mask: Node) -> Optional[Node]:
    """The bool tensor an additive mask is made of: `where(allowed, 0, finfo.min or -inf)` -> allowed (the 0 a
    literal, a zeros tensor, or a constant 0-d tensor such as `torch.tensor(0.0)`)."""
    if mask.meta.get("val") is not None and mask.meta["val"].dtype == torch.bool:
        return mask
    if mask.target is aten.where.ScalarOther and len(mask.args) == 3:
        cond, zero, other = mask.args
        if isinstance(zero, Node) and zero.target not in (aten.zeros.default, aten.zeros_like.default):
            value = evaluate_constant(gm, zero)
            zero = 0 if value is not None and value.dim() == 0 and value.item() == 0 else zero
        zero_ok = zero == 0 or (isinstance(zero, Node) and zero.target in (aten.zeros.default, aten.zeros_like.default))
        if zero_ok and isinstance(other, (int, float)) and other <= -1e30:
            return cond
    return None


def _prove(gm: GraphModule, mask: Node, sq, skv, writes: mask_algebra.Writes, batch=None) -> Optional[MaskStructure]:
    """Static sizes and no runtime input: run the subgraph once and compare. Otherwise (symbolic sizes, or the
    user's attention_mask among the inputs): evaluate it as a formula of the indices (mask_algebra) and compare the
    formulas."""
    if isinstance(sq, int) and isinstance(skv, int):
        value = evaluate_constant(gm, mask)
        if value is not None:
            return classify(value, sq, skv)
    allowed = _boolean_part(gm, mask)
    # read where the mask is made of it (the where of an additive mask): a write to it before then counts too
    formula = mask_algebra.evaluate(allowed, reader=mask, writes=writes) if allowed is not None else None
    found = mask_algebra.structure(formula, sq, skv, batch) if formula is not None else None
    if found is None:
        return None
    causal, window, keys, positions = found
    if keys is None and positions is None:
        return MaskStructure(causal, window)
    if allowed is not mask:  # additive: eager gives a fully masked row (padding everywhere, or runtime positions
        return None  # before the first key) 1/n per key, a structure gives it nothing
    keys_node = next(n for n in gm.graph.nodes if n.name == keys) if keys is not None else None
    return MaskStructure(causal, window, keys_node, positions)


def _query_positions(gm: GraphModule, formula, q: Node, before: Node) -> Optional[Node]:
    """The query positions `formula` (mask_algebra.position_terms: the query index, runtime tensors read at it or
    at a fixed element, integers) computed in the graph as a [Sq] integer tensor, before `before`. The runtime
    tensors are graph inputs, which the mask read before any in-place write to them (mask_algebra.evaluate): they
    are copied at the start of the graph, so a write counter that the step increments later keeps its value here.
    None where a runtime tensor is not the integer input that the formula reads."""
    terms = mask_algebra.position_terms(formula)
    first_op = next(n for n in gm.graph.nodes if n.op != "placeholder")
    q_val = q.meta["val"]
    sq = q_val.shape[2]
    inputs = {n.name: n for n in gm.graph.nodes if n.op == "placeholder"}
    graph = gm.graph
    fake_mode = torch._guards.detect_fake_mode([q_val])

    def call(target, args, kwargs=None):
        node = graph.call_function(target, tuple(args), kwargs or {})
        values = [a.meta["val"] if isinstance(a, Node) else a for a in args]
        with fake_mode:
            node.meta["val"] = target(*values, **(kwargs or {}))
        return node

    with graph.inserting_before(before):
        length = sq
        if not isinstance(sq, int):
            length = graph.call_function(aten.sym_size.int, (q, 2))
            length.meta["val"] = sq
        total, constant, snapshots = None, 0, {}
        for coeff, factor in terms:
            if factor == 1:
                constant += coeff
                continue
            if factor == mask_algebra.X(2):
                value = call(aten.arange.default, [length], {"dtype": torch.int64, "device": q_val.device})
            else:
                source = inputs.get(factor.func.__name__)
                val = source.meta.get("val") if source is not None else None
                if not isinstance(val, torch.Tensor) or val.dim() != len(factor.args) or val.dtype.is_floating_point \
                        or val.dtype == torch.bool or val.device != q_val.device:
                    return None
                if source not in snapshots:  # as the graph received it, which is what the mask read
                    with graph.inserting_before(first_op):
                        snapshots[source] = call(aten.clone.default, [source])
                source = snapshots[source]
                if factor.args == (mask_algebra.X(2),):
                    if not mask_algebra.same_size(val.shape[0], sq):
                        return None
                    value = source
                else:  # one value for every query: a 0-d tensor, or one element (a size-1 mask dim reads element 0)
                    value = source
                    if factor.args:
                        value = call(aten.slice.Tensor, [source, 0, int(factor.args[0]), int(factor.args[0]) + 1])
                    value = call(aten.expand.default, [value, [length]])
                if val.dtype != torch.int64:  # the formula's sum is exact: computed in int64, not in val's dtype
                    value = call(aten._to_copy.default, [value], {"dtype": torch.int64})
            if coeff != 1:
                value = call(aten.mul.Tensor, [value, coeff])
            total = value if total is None else call(aten.add.Tensor, [total, value])
        if constant:
            total = call(aten.add.Tensor, [total, constant])
    return total


def _key_padding_mask(gm: GraphModule, keys: Node, q: Node, k: Node, before: Node) -> Node:
    """`keys[:B, :Skv] != 0` as a [B, 1, 1, Skv] bool tensor, the key-padding form the kernels read one row of per
    key tile. The slices are there only where the graph does not say keys is [B, Skv]: the mask read keys[b, j]
    for b < B, j < Skv, and nothing more is known of its size."""
    graph, value = gm.graph, keys.meta["val"]
    node = keys
    with graph.inserting_before(before):
        for dim, (source, source_dim) in enumerate(((q, 0), (k, 2))):
            size = source.meta["val"].shape[source_dim]
            if mask_algebra.same_size(value.shape[dim], size):
                continue
            length = size
            if not isinstance(size, int):
                length = graph.call_function(aten.sym_size.int, (source, source_dim))
                length.meta["val"] = size
            node = graph.call_function(aten.slice.Tensor, (node, dim, 0, length))
            value = value.narrow(dim, 0, size)
            node.meta["val"] = value
        node = graph.call_function(aten.ne.Scalar, (node, 0))
        for dim in (1, 2):
            node = graph.call_function(aten.unsqueeze.default, (node, dim))
    node.meta["val"] = value.ne(0)[:, None, None, :]
    return node


def analyse_masks(gm: GraphModule) -> dict[Node, MaskStructure]:
    """Give each mojo.attention node whose mask is proven causal / sliding-window (+ key padding) that structure
    instead of the tensor. Returns node -> structure, for the report."""
    proven, cache, padding, positions = {}, {}, {}, {}
    writes = mask_algebra.Writes(gm.graph)
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not mojo.attention.default:
            continue
        args = _arguments(node)
        mask, q, k = args["mask"], args["q"].meta.get("val"), args["k"].meta.get("val")
        if not isinstance(mask, Node) or args["q_pos"] is not None or args["causal"] or args["window"] \
                or q is None or k is None:
            continue
        if writes.before(mask, node):
            continue  # written in place before attention reads it
        key = (mask, str(q.shape[0]), str(q.shape[2]), str(k.shape[2]))
        if key not in cache:
            try:
                cache[key] = _prove(gm, mask, q.shape[2], k.shape[2], writes, batch=q.shape[0])
            except Exception as e:  # an optimisation, not a requirement: a proof that fails keeps the tensor
                log.debug("mojo attention: mask proof failed, the mask stays a tensor: %s", e)
                cache[key] = None
        structure = cache[key]
        if structure is None:
            continue
        q_pos = None
        if structure.positions is not None:
            if key not in positions:
                positions[key] = _query_positions(gm, structure.positions, args["q"], node)
            q_pos = positions[key]
            if q_pos is None:
                continue
        mask_arg = None
        if structure.keys is not None and writes.before(structure.keys, node):
            continue  # the key-padding form reads attention_mask where attention runs: it must be unchanged there
        if structure.keys is not None:
            if key not in padding:
                padding[key] = _key_padding_mask(gm, structure.keys, args["q"], args["k"], node)
            mask_arg = padding[key]
        args.update(mask=mask_arg, q_pos=q_pos, causal=structure.causal, window=structure.window)
        target = args.pop("target")
        node.args = tuple(args.values())
        node.kwargs = {"target": target}
        proven[node] = structure
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return proven


def _repeated_heads(node) -> Optional[tuple[Node, object]]:
    """(x, n) when node is HF's repeat_kv(x, n) -- `x[:, :, None].expand(b, h, n, s, d).reshape(b, h * n, s, d)` --
    by its shapes: each of its heads j is x's head j // n."""
    if not (isinstance(node, Node) and node.target is aten.reshape.default):
        return None
    expand = node.args[0]
    if not (isinstance(expand, Node) and expand.target is aten.expand.default):
        return None
    unsqueeze = expand.args[0]
    if not (isinstance(unsqueeze, Node) and unsqueeze.target is aten.unsqueeze.default
            and unsqueeze.args[1] in (2, -3)):
        return None
    x = unsqueeze.args[0]
    vals = [n.meta.get("val") if isinstance(n, Node) else None for n in (x, expand, node)]
    if not all(isinstance(v, torch.Tensor) for v in vals) or vals[0].dim() != 4:
        return None
    (b, h, s, d), (eb, eh, n, es, ed), out = vals[0].shape, vals[1].shape, vals[2].shape
    same = mask_algebra.same_size
    if not (vals[1].dim() == 5 and all(same(p, q) for p, q in ((b, eb), (h, eh), (s, es), (d, ed)))):
        return None
    if not (vals[2].dim() == 4 and all(same(p, q) for p, q in ((out[0], b), (out[1], h * n), (out[2], s),
                                                               (out[3], d)))):
        return None
    return x, n


def share_repeated_kv(gm: GraphModule) -> int:
    """Give each `mojo::attention` whose k and v are repeat_kv(x, n) of one n the un-repeated x: the op's grouped
    heads read kv head i // (Hq / Hkv), which is what repeat_kv spells, so each kv head is read once instead of n
    times and never materialised. (The attention patterns take k and v before repeat_kv; this catches the sites they
    could not, such as a dynamic-shape graph whose sizes Dynamo passes as inputs where the pattern's re-trace reads
    them off the tensors.) Not where the cache is written between repeat_kv's copy and the attention's read.
    Returns the number of ops changed."""
    writes, changed = None, 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not mojo.attention.default:
            continue
        args = _arguments(node)
        k, v = _repeated_heads(args["k"]), _repeated_heads(args["v"])
        if k is None or v is None or not mask_algebra.same_size(k[1], v[1]):
            continue
        writes = writes or mask_algebra.Writes(gm.graph)
        if writes.between(k[0], args["k"], node) or writes.between(v[0], args["v"], node):
            continue
        args.update(k=k[0], v=v[0])
        target = args.pop("target")
        node.args = tuple(args.values())
        node.kwargs = {"target": target}
        changed += 1
    if changed:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return changed
