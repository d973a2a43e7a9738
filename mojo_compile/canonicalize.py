"""Canonicalise the pre-dispatch ATen graph so that one pattern covers many spellings.

A short rule list in the style of tinygrad's PatternMatcher: each rule looks at one node and returns what should
replace it (an existing node), a new node, or None. Every rule is exact -- it never changes a single bit of any
value -- so it is also safe on the parts of the graph no pattern matches. Rules that would turn a fresh tensor into
an alias of its input (`x * 1.0`) apply only where neither is written in place (pre-dispatch graphs keep in-place
ops such as StaticCache's index_copy_). The same pass runs on the graphs traced
from the patterns themselves, which is what makes the two sides comparable.

What it does not need to do: `contiguous()` on a contiguous tensor and `x.float()` on an fp32 tensor are already
gone or are the no-op casts removed below; `F.dropout(x, p, training=False)` arrives as `aten.dropout`.
"""
from __future__ import annotations

import math
import operator
import sys
from typing import Callable, Optional

import torch
from torch.fx import Graph, GraphModule, Node

aten = torch.ops.aten


def _val(arg):
    return arg.meta.get("val") if isinstance(arg, Node) else None


def _same_tensor_type(a, b) -> bool:
    """Same dtype, device and shape (so replacing b by a is exact)."""
    va, vb = _val(a), _val(b)
    return (isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor) and va.dtype == vb.dtype
            and va.device == vb.device and va.shape == vb.shape)


def _no_op_cast(node: Node) -> Optional[Node]:
    """`x.to(x.dtype)`, `x.to(x.device, x.dtype)`: the cast returns x itself (no copy, no layout change)."""
    if node.kwargs.get("copy") or node.kwargs.get("memory_format") is not None or \
            any(a is True for a in node.args[2:]):  # the positional copy flag
        return None
    return node.args[0] if _same_tensor_type(node.args[0], node) else None


def _type_as(node: Node) -> Optional[Node]:
    """`x.type_as(y)` -> `x.to(y.dtype)`: one spelling of a cast."""
    if _same_tensor_type(node.args[0], node):
        return node.args[0]
    other = _val(node.args[1])
    if other is None:
        return None
    with node.graph.inserting_before(node):
        return node.graph.call_function(aten.to.dtype, (node.args[0], other.dtype))


def _eval_dropout(node: Node) -> Optional[Node]:
    """Eval-mode dropout, and dropout with p = 0 (HF passes `dropout=0.0` in training too), return their input:
    ATen's dropout returns the input itself for `p == 0 or not train`."""
    x, p, train = (list(node.args) + [node.kwargs.get("p"), node.kwargs.get("train")])[:3]
    return x if (train is False or p == 0) and _same_tensor_type(x, node) else None


def _identity_arith(identity, zero_sign: int = 0) -> Callable[[Node], Optional[Node]]:
    """`x * 1.0`, `x / 1`, `x + (-0.0)`, `x - 0.0` (alpha 1) hold x's values when the result keeps x's dtype and
    shape. On floats only the zero of `zero_sign` is an identity: `-0.0 + 0.0` is +0.0 (so `x + 0` is not one), and
    `-0.0 - (-0.0)` is +0.0; on integers any zero is. They are fresh tensors, though: dropping them is exact only where
    neither side is written in place later."""
    def rule(node: Node) -> Optional[Node]:
        x = node.args[0]
        if len(node.args) == 2 and node.args[1] == identity and node.kwargs.get("alpha", 1) == 1 \
                and _same_tensor_type(x, node) and not _touched_by_mutation(node) \
                and not _touched_by_mutation(x) and _identity_zero(node.args[1], _val(x), zero_sign):
            return x
        return None
    return rule


def _identity_zero(value, x, zero_sign: int) -> bool:
    """Whether `value` is the identity of its op for x's dtype: any value where the op has no zero sign to keep
    (zero_sign 0: * and /) or x is not floating; else a float zero of that sign (bool / int zeros are +0)."""
    if zero_sign == 0 or not x.dtype.is_floating_point:
        return True
    return isinstance(value, float) and math.copysign(1.0, value) == zero_sign


def _view_base(node) -> Optional[Node]:
    """The tensor a view node aliases (views per the op schema; getitem of a split), else None."""
    if not isinstance(node, Node) or node.op != "call_function":
        return None
    if node.target is operator.getitem:
        return _view_base(node.args[0]) and node.args[0]
    schema = getattr(node.target, "_schema", None)
    if schema is not None and not schema.is_mutable and any(r.alias_info is not None for r in schema.returns):
        return node.args[0] if isinstance(node.args[0], Node) else None
    return None


def written_by(node: Node) -> list:
    """The tensor arguments the in-place op `node` writes, by its schema, those in a written list (`Tensor(a!)[]`:
    `_foreach_mul_([x, ...])`, an `out=` list) included (detach_ changes autograd metadata only, no value: none)."""
    schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
    if schema is None or not schema.is_mutable or node.target is aten.detach_.default:
        return []
    out = []
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            value = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
            if isinstance(value, Node):
                out.append(value)
            elif isinstance(value, (list, tuple)):
                out.extend(v for v in value if isinstance(v, Node))
    return out


def value_storage(value):
    """The storage of a traced tensor value, else None: views share their base's."""
    from torch.multiprocessing.reductions import StorageWeakRef

    if not isinstance(value, torch.Tensor):
        return None
    try:
        return StorageWeakRef(value.untyped_storage())
    except (RuntimeError, NotImplementedError):  # a tensor subclass without a storage of its own
        return None


def storage_of(node):
    """The storage of node's traced value (value_storage): graph inputs that are views of one another
    (`f(big[:2], big)`) share one, which no view chain links (each placeholder is its own root)."""
    return value_storage(_val(node))


def _touched_by_mutation(node: Node) -> bool:
    """True when node, a tensor it is a view of, or a view of that tensor is written by an in-place op (StaticCache
    index_copy_, ...), or its traced value shares a written tensor's storage (graph inputs that are views of one
    another). Memoised per graph: the set of written tensors and their view chains, and their storages."""
    graph = node.graph
    memo = getattr(graph, "_mojo_touched", None)
    if memo is None:
        touched, storages = set(), set()
        for n in graph.nodes:
            for value in written_by(n):
                storages.add(storage_of(value))
                while isinstance(value, Node):
                    touched.add(value)
                    value = _view_base(value)
        storages.discard(None)
        memo = graph._mojo_touched = (touched, storages)
    touched, storages = memo
    if storages and storage_of(node) in storages:
        return True
    while node is not None:
        if node in touched:
            return True
        node = _view_base(node)
    return False


def _same_shape_view(node: Node) -> Optional[Node]:
    return node.args[0] if _same_tensor_type(node.args[0], node) else None


def _whole_slice(node: Node) -> Optional[Node]:
    """`x[:, :, None]` traced with symbolic sizes keeps a slice over a whole dim (start 0, end INT64_MAX, step 1)
    that static sizes elide -- HF's repeat_kv in a dynamic-shape decode step: the same tensor (a view with x's
    shape, strides and offset), so drop it, or the patterns (traced with static sizes) would miss the site."""
    x, dim, start, end, step = (list(node.args) + [0, None, None, 1][len(node.args) - 1:])[:5]
    if node.kwargs or not isinstance(x, Node) or start not in (0, None) or step != 1:
        return None
    return x if end is None or (isinstance(end, int) and end >= 9223372036854775807) else None


def _view_chain(node: Node) -> Optional[Node]:
    """reshape(view|reshape(x, a), b) -> reshape(x, b); view(view(x, a), b) -> view(x, b) for a contiguous x
    (a view of a view of a strided tensor need not be a valid view of it)."""
    if _same_tensor_type(node.args[0], node):
        return node.args[0]
    inner = node.args[0]
    if isinstance(inner, Node) and inner.op == "call_function" and inner.target in _VIEW_OPS:
        base = _val(inner.args[0])
        if node.target is aten.reshape.default or (
                inner.target is aten.view.default and base is not None and base.is_contiguous()):
            with node.graph.inserting_before(node):
                return node.graph.call_function(node.target, (inner.args[0], *node.args[1:]))
    return None


def _square(node: Node) -> Optional[Node]:
    """`x.square()` and `x * x` -> `x.pow(2)`: ATen computes pow(x, 2) as x * x, so the three are bitwise equal."""
    if node.target is aten.mul.Tensor and not (len(node.args) == 2 and node.args[0] is node.args[1]):
        return None
    with node.graph.inserting_before(node):
        return node.graph.call_function(aten.pow.Tensor_Scalar, (node.args[0], 2))


def _rms_norm_default_eps(node: Node) -> Optional[Node]:
    """`F.rms_norm(x, shape, w)` / `nn.RMSNorm(d)` with eps None -> the same call with ATen's default written out:
    the machine epsilon of x's *computation* type -- fp32's for bf16 / fp16 / fp32 inputs, fp64's for fp64 -- so the
    norm patterns, which capture eps as a constant, see the value ATen uses."""
    args = list(node.args) + [None] * (4 - len(node.args))
    x = _val(args[0])
    if args[3] is not None or node.kwargs.get("eps") is not None or x is None or not x.dtype.is_floating_point:
        return None
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    with node.graph.inserting_before(node):
        return node.graph.call_function(aten.rms_norm.default, (args[0], args[1], args[2],
                                                                torch.finfo(compute).eps))


def all_arguments(node: Node) -> Optional[Node]:
    """An op with its schema's defaults written out (`F.cross_entropy(x, t)` traces to `cross_entropy_loss(x, t)`,
    with ignore_index=5 to `cross_entropy_loss(x, t, None, 1, 5)`): every positional argument positional, every
    keyword-only one (`gelu`'s approximate, `sum`'s dtype) a keyword, as the op's schema accepts them. One pattern
    then covers every spelling and captures each argument where it stands. The same call."""
    schema = node.target._schema
    positional = [a for a in schema.arguments if not a.kwarg_only]
    keyword_only = [a for a in schema.arguments if a.kwarg_only]
    if len(node.args) > len(positional) or not set(node.kwargs) <= {a.name for a in schema.arguments}:
        return None
    if len(node.args) == len(positional) and set(node.kwargs) == {a.name for a in keyword_only}:
        return None  # already written out
    values = list(node.args)
    for argument in positional[len(node.args):]:
        if argument.name in node.kwargs:
            values.append(node.kwargs[argument.name])
        elif argument.has_default_value():
            values.append(argument.default_value)
        else:
            return None
    keywords = {}
    for argument in keyword_only:
        if argument.name in node.kwargs:
            keywords[argument.name] = node.kwargs[argument.name]
        elif argument.has_default_value():
            keywords[argument.name] = argument.default_value
        else:
            return None
    with node.graph.inserting_before(node):
        return node.graph.call_function(node.target, tuple(values), keywords)


# Elementwise ops of one tensor (other operands Python scalars): they commute with putting a size-1 dim back.
_UNARY_POINTWISE = {aten.rsqrt.default, aten.sqrt.default, aten.reciprocal.default, aten.neg.default,
                    aten.pow.Tensor_Scalar, aten.to.dtype}
_SCALAR_POINTWISE = {aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor, aten.add.Scalar,
                     aten.sub.Scalar, aten.mul.Scalar, aten.div.Scalar}


def _scalar_pointwise_of(node) -> Optional[Node]:
    """The tensor operand of an elementwise op whose every other operand is a Python scalar, else None."""
    if not isinstance(node, Node) or node.op != "call_function":
        return None
    if node.target in _UNARY_POINTWISE and all(not isinstance(a, Node) for a in node.args[1:]) \
            and not node.kwargs.get("copy") and node.kwargs.get("memory_format") is None:
        return node.args[0]
    if node.target in _SCALAR_POINTWISE and not node.kwargs and len(node.args) == 2 \
            and isinstance(node.args[1], (int, float)) and not isinstance(node.args[1], bool):
        return node.args[0]
    return None


def _mean_dims_from_the_end(node: Node) -> Optional[Node]:
    """`x.mean(x.dim() - 1)` -> `x.mean(-1)`: reduced dims counted from the end, as the patterns write them."""
    x, dims = (list(node.args) + [node.kwargs.get("dim")])[:2]
    x_val = _val(x)
    if x_val is None or not isinstance(dims, (list, tuple)) or not all(isinstance(d, int) for d in dims) \
            or all(d < 0 for d in dims) or x_val.dim() == 0:
        return None
    rank = x_val.dim()
    args = (x, [d % rank - rank for d in dims], *node.args[2:])
    with node.graph.inserting_before(node):
        return node.graph.call_function(aten.mean.dim, args, {k: v for k, v in node.kwargs.items() if k != "dim"})


def _unsqueezed_mean(node: Node) -> Optional[Node]:
    """`f(x.mean(d)).unsqueeze(d)` -> `f(x.mean(d, keepdim=True))`, f a chain of elementwise ops with scalar
    operands (`rsqrt(ms + eps)`), one reduced dim put back where it was: the same values and shape. The unsqueeze is
    a view, the rebuilt chain fresh tensors: exact only where none of them is written in place."""
    source, dim = (list(node.args) + [node.kwargs.get("dim")])[:2]
    chain = []
    while isinstance(source, Node) and source.target is not aten.mean.dim:
        chain.append(source)
        source = _scalar_pointwise_of(source)
    mean = source
    if mean is None or not isinstance(dim, int):
        return None
    x, dims, keepdim = (list(mean.args) + [mean.kwargs.get("dim"), mean.kwargs.get("keepdim", False)])[:3]
    x_val = _val(x)
    if keepdim or x_val is None or not isinstance(dims, (list, tuple)) or len(dims) != 1 \
            or not isinstance(dims[0], int):
        return None
    rank = x_val.dim()
    if rank == 0 or dims[0] % rank != dim % rank \
            or any(_touched_by_mutation(n) for n in (node, mean, *chain)):
        return None
    kwargs = {k: v for k, v in mean.kwargs.items() if k not in ("dim", "keepdim")}
    with node.graph.inserting_before(node):
        out = node.graph.call_function(aten.mean.dim, (x, [dims[0] % rank - rank], True), kwargs)
        for old in [mean, *reversed(chain)]:
            if old is not mean:
                out = node.graph.call_function(old.target, (out, *old.args[1:]), dict(old.kwargs))
            if isinstance(_val(old), torch.Tensor):
                out.meta["val"] = _val(old).unsqueeze(dims[0])
    return out


def _matrix_transpose(node: Node) -> Optional[Node]:
    """`W.T`, `W.mT`, `W.transpose(0, 1)`, `W.permute(1, 0)` of a 2-D W -> `W.t()`: one spelling of the LM head's
    `h @ W.t()` (patterns/linear_cross_entropy.py). The same view of the same tensor. A transpose of a higher-rank
    tensor gets its two dims counted from the start, smaller first (`k.transpose(-1, -2)` of a 4-D k ->
    `transpose(k, 2, 3)`, as the attention patterns write it): the same view too."""
    x = node.args[0]
    value = _val(x)
    if not isinstance(value, torch.Tensor):
        return None
    if node.target is aten.transpose.int and value.dim() > 2 and not node.kwargs and len(node.args) == 3:
        rank = value.dim()
        dims = sorted(d % rank for d in node.args[1:3])
        if dims == list(node.args[1:3]) or dims[0] == dims[1]:
            return None
        with node.graph.inserting_before(node):
            return node.graph.call_function(aten.transpose.int, (x, *dims))
    if value.dim() != 2:
        return None
    if node.target is aten.transpose.int and sorted(d % 2 for d in node.args[1:3]) != [0, 1]:
        return None
    if node.target is aten.permute.default and [d % 2 for d in node.args[1]] != [1, 0]:
        return None
    with node.graph.inserting_before(node):
        return node.graph.call_function(aten.t.default, (x,))


def _softmax_spelling(node: Node) -> Optional[Node]:
    """`softmax(x, d)` of an fp32 x -> `softmax(x, d, torch.float32)` (the cast to its own dtype is a no-op), with d
    counted from the end (`dim=3` of a 4-D x -> -1): a hand-written `F.softmax(w, dim=-1)` and the fp32 eager
    attention's `F.softmax(w, dim=-1, dtype=torch.float32)` are the same computation. Only fp32 is written out: a
    softmax of bf16 scores without a dtype rounds its probabilities to bf16, which the patterns' fp32 softmax does
    not (the matcher ignores dtype arguments, so the two must differ in form)."""
    x, dim, dtype = (list(node.args) + [None, None])[:3]
    value = _val(x)
    if node.kwargs or not isinstance(value, torch.Tensor) or not isinstance(dim, int) or value.dim() == 0:
        return None
    canonical_dim = dim % value.dim() - value.dim()
    canonical_dtype = torch.float32 if dtype is None and value.dtype == torch.float32 else dtype
    if (canonical_dim, canonical_dtype) == (dim, dtype) and len(node.args) == 3:
        return None
    with node.graph.inserting_before(node):
        return node.graph.call_function(aten.softmax.int, (x, canonical_dim, canonical_dtype))


_VIEW_OPS = (aten.view.default, aten.reshape.default)

RULES: dict = {
    aten.to.dtype: _no_op_cast,
    aten.to.dtype_layout: _no_op_cast,
    aten.to.device: _no_op_cast,
    aten.type_as.default: _type_as,
    aten.dropout.default: _eval_dropout,
    aten.mul.Tensor: lambda n: _identity_arith(1)(n) or _square(n),
    aten.div.Tensor: _identity_arith(1),
    aten.add.Tensor: _identity_arith(0, zero_sign=-1),
    aten.sub.Tensor: _identity_arith(0, zero_sign=1),
    aten.square.default: _square,
    aten.view.default: _view_chain,
    aten.reshape.default: _view_chain,
    aten.expand.default: _same_shape_view,
    aten.slice.Tensor: _whole_slice,
    aten.rms_norm.default: _rms_norm_default_eps,
    aten.unsqueeze.default: _unsqueezed_mean,
    aten.mean.dim: _mean_dims_from_the_end,
    aten.cross_entropy_loss.default: all_arguments,
    aten.numpy_T.default: _matrix_transpose,
    aten.mT.default: _matrix_transpose,
    aten.transpose.int: _matrix_transpose,
    aten.permute.default: _matrix_transpose,
    aten.softmax.int: _softmax_spelling,
}


# The (op, rule) pairs this package registers: those above and those its own modules add (LayerNorm's). Any other
# pair -- a user's or another package's, even one made of this module's helpers (`all_arguments`) -- changes what a
# pattern traces to in a way this package's source does not say, so the pattern cache keeps no trace under it.
BUILTIN_RULES: dict = dict(RULES)
_PACKAGE = __name__.rsplit(".", 1)[0]


def builtin_rules_only() -> bool:
    """Whether every registered rule is one this package registered (see BUILTIN_RULES)."""
    return all(BUILTIN_RULES.get(op) is rule for op, rule in RULES.items())


def register_rule(op, rule: Callable[[Node], Optional[Node]]) -> None:
    """Canonicalise `op`'s nodes with `rule` (node -> its replacement, or None to leave it), from the module of the
    fusion whose patterns need it (e.g. `register_rule(aten.layer_norm.default, all_arguments)`): the rules run on
    the model's graph and on every pattern's trace alike. One rule per op. A rule registered from a module of this
    package is a built-in one (BUILTIN_RULES)."""
    if RULES.get(op, rule) is not rule:
        raise ValueError(f"mojo: {op} already has a canonicalisation rule")
    if RULES.get(op) is rule:
        return
    caller = sys._getframe(1).f_globals.get("__name__", "")
    if caller == _PACKAGE or caller.startswith(_PACKAGE + "."):
        BUILTIN_RULES[op] = rule
    RULES[op] = rule
    from . import patterns  # patterns traced before the rule existed are traced again, under it
    patterns.forget_traces()
    patterns.registry_changed(f"canonicalisation rule for {op} registered")


def canonicalize(graph_or_module: Graph | GraphModule) -> int:
    """Apply RULES in one topological sweep (each rewrite only looks upstream), then drop dead nodes.
    Returns the number of rewrites."""
    graph = graph_or_module.graph if isinstance(graph_or_module, GraphModule) else graph_or_module
    rewrites = 0
    for node in list(graph.nodes):
        rule = RULES.get(node.target) if node.op == "call_function" else None
        new = rule(node) if rule is not None else None
        if new is None or new is node:
            continue
        if "val" in node.meta and "val" not in new.meta:
            new.meta.update(node.meta)
        node.replace_all_uses_with(new)
        graph.erase_node(node)
        rewrites += 1
        if new.op == "call_function" and new.target in RULES:  # a rewrite may enable another on the new node
            again = RULES[new.target](new)
            if again is not None and again is not new:
                new.replace_all_uses_with(again)
                graph.erase_node(new)
    graph.__dict__.pop("_mojo_touched", None)
    graph.eliminate_dead_code()
    if isinstance(graph_or_module, GraphModule):
        graph_or_module.recompile()
    return rewrites
