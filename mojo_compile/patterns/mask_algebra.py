"""Symbolic evaluation of an attention mask's subgraph, for masks whose sizes are symbolic (dynamic shapes).

Each tensor of the subgraph is represented as a formula of its own indices: a sympy expression in the index
symbols X0, X1, ... (one per dim) with a shape. `arange(n)` is X0; `unsqueeze`, `expand`, `slice` move or offset the
index symbols; arithmetic and comparisons build expressions; `index` substitutes the index tensors' formulas into the
indexed tensor's; `diff` and `cumsum` are evaluated where the result is a closed form (what HF's packed-sequence check
does to position ids that are an arange: every difference is 1, so every sequence id is 0). A runtime integer or
bool tensor (the user's attention_mask) is an uninterpreted function of its indices, `arg2_1(X0, X1)`: the formula
can then say "causal and attention_mask[b, j] != 0" without knowing the data. Anything else -- a float runtime
tensor, an op not listed -- gives up (None). The result is the mask's value at [b, h, i, j] as a formula: exact for
every size and every value of the runtime tensors. Used by patterns/mask_analysis.py.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Optional

import sympy
from sympy.core.function import AppliedUndef
import torch
from torch.fx import Node

from .. import pattern_cache
from ..canonicalize import _view_base, storage_of, written_by

aten = torch.ops.aten
INT64_MAX = 9223372036854775807


def X(k: int) -> sympy.Symbol:
    return sympy.Symbol(f"X{k}", integer=True, nonnegative=True)


@dataclass
class Formula:
    expr: sympy.Basic  # the value at index (X0, X1, ...)
    shape: list  # sympy sizes; 1 where broadcast

    @property
    def rank(self) -> int:
        return len(self.shape)


def _size(value) -> sympy.Basic:
    if isinstance(value, torch.SymInt):
        return value.node.expr
    return value if isinstance(value, sympy.Basic) else sympy.Integer(int(value))


def same_size(a, b) -> bool:
    """Whether two sizes (ints, SymInts or formula sizes) are equal for every value of the symbols."""
    return sympy.simplify(_size(a) - _size(b)) == 0


def _shift(f: Formula, by: int, at: int = 0) -> sympy.Basic:
    """f's expression with index symbols X_k (k >= at) renamed X_{k+by}."""
    return f.expr.xreplace({X(k): X(k + by) for k in range(at, f.rank)}) if by else f.expr


def _pinned(expr, shape, offset: int = 0) -> sympy.Basic:
    """expr with the index symbol of every size-1 dim set to 0: a broadcast dim reads element 0 whatever the
    result's index there (`arange(1)` is 0, not the other operand's index)."""
    return expr.xreplace({X(d + offset): 0 for d, size in enumerate(shape) if size == 1})


def _broadcast(*fs: Formula) -> tuple[list, list]:
    """Right-aligned broadcast: each formula's expression over the result's index symbols, and the result shape."""
    rank = max(f.rank for f in fs)
    exprs = [_pinned(_shift(f, rank - f.rank), f.shape, rank - f.rank) for f in fs]
    shape = []
    for d in range(rank):
        sizes = [f.shape[d - (rank - f.rank)] for f in fs if d - (rank - f.rank) >= 0]
        non_one = [s for s in sizes if s != 1]
        shape.append(non_one[0] if non_one else sympy.Integer(1))
    return exprs, shape


def _scalar(value) -> Formula:
    return Formula(sympy.sympify(value), [])


_RELATIONS = (sympy.Eq, sympy.Ne, sympy.Le, sympy.Lt, sympy.Ge, sympy.Gt)


def _as_relation_operand(fn, a, b):
    """A bool tensor compared with 0 or 1 (`am != 0` on a bool `am`): the truth value itself or its negation --
    sympy would compare a boolean with an integer as unequal. Other arithmetic on booleans gives up."""
    for x, y in ((a, b), (b, a)):
        if _is_boolean(x):
            if fn in (sympy.Ne, sympy.Eq) and y in (sympy.Integer(0), sympy.Integer(1)):
                keep = (fn is sympy.Ne) == (y == 0)
                return x if keep else sympy.Not(x)
            raise TypeError("arithmetic on a boolean")
    return None


def _int64_result(node) -> bool:
    """Whether node computes an int64 tensor. The formulas are exact integer arithmetic; a narrower integer dtype
    wraps where they do not (uint8 `cache_position + 100` is 4 at 160), so arithmetic in one is not modelled.
    (int64 is taken as exact: a mask's positions are far from 2**63.)"""
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and val.dtype == torch.int64


def _binary(fn):
    def rule(node, a, b):
        if node.kwargs.get("alpha", 1) != 1:
            return None  # add / sub with alpha: not modelled
        if fn in (operator.add, operator.sub) and not _int64_result(node):
            return None
        exprs, shape = _broadcast(a, b)
        if fn in _RELATIONS or fn in (operator.add, operator.sub):
            folded = _as_relation_operand(fn, *exprs) if fn in (sympy.Eq, sympy.Ne) else None
            if folded is not None:
                return Formula(folded, shape)
            if any(_is_boolean(e) for e in exprs):
                return None  # a comparison or sum with a truth value: not modelled
        return Formula(fn(*exprs), shape)
    return rule


def _arange(node, *args):
    if len(args) != 1 or node.kwargs.get("dtype") not in (None, torch.int64):
        return None
    return Formula(X(0), [_size(args[0])])


def _unsqueeze(node, x, dim):
    dim = dim % (x.rank + 1)
    return Formula(_shift(x, 1, dim), x.shape[:dim] + [sympy.Integer(1)] + x.shape[dim:])


def _expand(node, x, sizes):
    rank = len(sizes)
    shifted = Formula(_pinned(_shift(x, rank - x.rank), x.shape, rank - x.rank),
                      [sympy.Integer(1)] * (rank - x.rank) + x.shape)
    shape = [shifted.shape[d] if s == -1 else _size(s) for d, s in enumerate(sizes)]
    return Formula(shifted.expr, shape)


def _slice(node, x, dim=0, start=None, end=None, step=1):
    dim = dim % x.rank
    if isinstance(start, torch.SymInt) or isinstance(end, torch.SymInt):
        return None  # a size as a bound: not modelled (and testing one, `start or 0`, would add a guard)
    start = start or 0
    if step != 1 or not isinstance(start, int) or start < 0:
        return None
    size = x.shape[dim]
    if end is None or end == INT64_MAX:
        new = size - start
    elif isinstance(end, int) and end >= 0:
        new = sympy.Min(size, end) - start
    else:
        return None
    return Formula(x.expr.xreplace({X(dim): X(dim) + start}), x.shape[:dim] + [new] + x.shape[dim + 1:])


def _index(node, x, indices):
    """x[i0, i1, ...]: the index tensors' formulas substituted for x's index symbols. torch wraps a negative
    index (-1 is the last row): an index not provably >= 0 is substituted as `i + size where i < 0`."""
    if len(indices) != x.rank or any(i is None for i in indices):
        return None
    exprs, shape = _broadcast(*indices)
    exprs = [e if e.is_nonnegative else sympy.Piecewise((e + x.shape[k], e < 0), (e, True))
             for k, e in enumerate(exprs)]
    return Formula(x.expr.xreplace({X(k): e for k, e in enumerate(exprs)}), shape)


def _diff(node, x, n=1, dim=-1, prepend=None, append=None):
    """diff along `dim` with a one-element prepend: x[k] - x[k - 1] for k >= 1, x[0] - prepend for k = 0."""
    dim = dim % x.rank
    if n != 1 or append is not None or prepend is None or x.shape[dim] == 0 or not _int64_result(node):
        return None
    k = X(dim)
    first = x.expr.xreplace({k: 0}) - prepend.expr.xreplace({k: 0})
    rest = x.expr - x.expr.xreplace({k: k - 1})
    value = sympy.simplify(sympy.Piecewise((first, sympy.Eq(k, 0)), (rest, True)))
    return Formula(value, x.shape)  # the prepend adds the element diff takes away


def _cumsum(node, x, dim, dtype=None):
    dim = dim % x.rank
    value = x.expr
    if value.has(X(dim)) or not _int64_result(node):
        return None
    if value in (sympy.true, sympy.false):
        value = sympy.Integer(1 if value == sympy.true else 0)
    return Formula(value * (X(dim) + 1), x.shape)


def _runtime(node: Node) -> Optional[Formula]:
    """A runtime integer / bool tensor: the function named after its node, applied to its indices (a bool tensor as
    `f(...) != 0`, the form `.bool()` of an integer tensor takes too)."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dtype.is_floating_point or val.dtype.is_complex:
        return None
    value = sympy.Function(node.name)(*(X(k) for k in range(val.dim())))
    return Formula(sympy.Ne(value, 0) if val.dtype == torch.bool else value, [_size(s) for s in val.shape])


def _is_boolean(expr) -> bool:
    """A truth value: a relation, And / Or / Not, true / false. (Not any sympy Boolean: Symbol is one, and the
    index symbols are integers.)"""
    from sympy.logic.boolalg import BooleanAtom, BooleanFunction
    return isinstance(expr, (sympy.core.relational.Relational, BooleanFunction, BooleanAtom))


def _to(node, x, *args):
    """A dtype conversion: to bool (`!= 0`) or to the dtype it has; any other conversion gives up."""
    source, result = node.args[0].meta.get("val"), node.meta.get("val")
    if not isinstance(source, torch.Tensor) or not isinstance(result, torch.Tensor):
        return None
    if result.dtype == torch.bool:
        return x if _is_boolean(x.expr) else Formula(sympy.Ne(x.expr, 0), x.shape)
    return x if result.dtype == source.dtype else None


def _ones_like(value):
    def rule(node, x, *args):
        return Formula(sympy.true if node.kwargs.get("dtype") == torch.bool else sympy.Integer(value), [])
    return rule


def _identity(node, x, *args):
    return x


def _padded(node, x, *args):
    """A constant pad of an integer / bool tensor (HF pads attention_mask with zeros to a StaticCache's length): a
    runtime tensor of its own, the pad's output, read where the mask reads it. Nothing is assumed of its values."""
    return _runtime(node)


RULES = {
    aten.arange.default: _arange,
    aten.unsqueeze.default: _unsqueeze,
    aten.expand.default: _expand,
    aten.slice.Tensor: _slice,
    aten.index.Tensor: _index,
    aten.diff.default: _diff,
    aten.cumsum.default: _cumsum,
    aten.new_ones.default: _ones_like(1),
    aten.constant_pad_nd.default: _padded, aten.pad.default: _padded,
    aten.to.dtype: _to, aten.to.device: _to, aten._to_copy.default: _to,
    aten.sub.Tensor: _binary(operator.sub),
    aten.add.Tensor: _binary(operator.add),
    aten.le.Tensor: _binary(sympy.Le), aten.lt.Tensor: _binary(sympy.Lt),
    aten.ge.Tensor: _binary(sympy.Ge), aten.gt.Tensor: _binary(sympy.Gt),
    aten.eq.Tensor: _binary(sympy.Eq), aten.ne.Tensor: _binary(sympy.Ne),
    aten.ne.Scalar: _binary(sympy.Ne), aten.eq.Scalar: _binary(sympy.Eq),
    aten.le.Scalar: _binary(sympy.Le), aten.gt.Scalar: _binary(sympy.Gt),
    aten.__and__.Tensor: _binary(sympy.And), aten.__or__.Tensor: _binary(sympy.Or),
    aten.bitwise_and.Tensor: _binary(sympy.And), aten.bitwise_or.Tensor: _binary(sympy.Or),
}


class Writes:
    """Where a graph's in-place ops write (a StaticCache's index_copy_ into its cache, the `add_` of its write
    counter, `m[:, 0] = True`): each written tensor, with the tensors it is a view of, -> the positions of its
    writes in the graph; and each written storage -> those positions (graph inputs that are views of one another
    share a storage, not a view chain: `f(positions=base[:5], base)` writing base)."""

    def __init__(self, graph):
        self.position, self.at, self.in_storage = {}, {}, {}
        for position, node in enumerate(graph.nodes):
            self.position[node] = position
            for value in written_by(node):
                storage = storage_of(value)
                if storage is not None:
                    self.in_storage.setdefault(storage, []).append(position)
                while isinstance(value, Node):
                    self.at.setdefault(value, []).append(position)
                    value = _view_base(value)

    def _storage_written(self, node: Node, low: int, high: int) -> bool:
        """Whether node's storage is written strictly between positions low and high."""
        return any(low < p < high for p in self.in_storage.get(storage_of(node), ())) if self.in_storage else False

    def between(self, node: Node, start: Node, end: Node) -> bool:
        """Whether node, or a tensor it is a view of, is written in place after `start` and before `end`."""
        low, high = self.position[start], self.position[end]
        if self._storage_written(node, low, high):
            return True
        while node is not None:
            if any(low < p < high for p in self.at.get(node, ())):
                return True
            node = _view_base(node)
        return False

    def before(self, node: Node, reader: Node) -> bool:
        """Whether node, or a tensor it is a view of, is written in place before `reader` reads it (then what
        reader reads is not the value node was computed with)."""
        limit = self.position[reader]
        # by the storage, only writes after node is made (node itself may be the in-place op that made its value)
        if self._storage_written(node, self.position[node], limit):
            return True
        while node is not None:
            if any(p < limit for p in self.at.get(node, ())):
                return True
            node = _view_base(node)
        return False


def _is_size(node: Node) -> bool:
    """Whether node is an integer of the graph's sizes (a SymInt): a SymInt input, or one the graph computes from
    them (`operator.sub` of two sizes: HF's pad amount `max_cache_len - attention_mask.shape[-1]` under symbolic
    sizes). Read as its value's expression in the size symbols (`_size`), which the graph's guards make its value
    at run time; the symbols are free, within only what the shape environment knows of every value they may take
    (a size is positive), so a proof over them holds for every size. A rule that cannot read one gives up."""
    return isinstance(node.meta.get("val"), torch.SymInt)


def evaluate(mask: Node, reader: Optional[Node] = None, writes: Optional[Writes] = None) -> Optional[Formula]:
    """The formula of the mask that `reader` (the attention op; default: the mask's own node) reads, or None where
    any part of its subgraph is not index arithmetic over sizes and runtime tensors. Each node of the subgraph must
    read its inputs as they were computed (or, for a runtime input, as the graph received it): none written in
    place before it reads them; nor may the mask be before `reader` reads it. A runtime input written later (a
    cache's write counter, incremented after the step's mask is built) is fine. `writes`: the graph's, where the
    caller has them."""
    writes = writes or Writes(mask.graph)
    if reader is not None and writes.before(mask, reader):
        return None
    env: dict = {}

    def visit(node: Node) -> Optional[Formula]:
        if node in env:
            return env[node]
        if node.op == "placeholder":  # (a SymInt placeholder is read through its users' meta, not here)
            env[node] = _runtime(node)
            return env[node]
        if node.op != "call_function":
            return None
        rule = RULES.get(node.target)
        if rule is None:
            return None
        for a in node.all_input_nodes:
            if _is_size(a):
                continue  # arange(s0) reads it from the node's meta below
            if writes.before(a, node):
                return None  # written in place before this read (`m[:, 0] = True`): the formula would be stale
            if visit(a) is None:
                return None
        args = []
        for a in node.args:
            if isinstance(a, Node) and _is_size(a):
                args.append(a.meta["val"])
            elif isinstance(a, Node):
                args.append(env[a])
            elif isinstance(a, (list, tuple)):
                items = []
                for v in a:
                    if isinstance(v, Node) and _is_size(v):
                        items.append(v.meta["val"])
                    elif isinstance(v, Node):
                        items.append(env[v])
                    else:
                        items.append(v)
                args.append(items)
            elif isinstance(a, (bool, int, float)) and node.target not in (aten.arange.default, aten.unsqueeze.default,
                                                                          aten.expand.default, aten.slice.Tensor,
                                                                          aten.diff.default, aten.cumsum.default):
                args.append(_scalar(a))
            else:
                args.append(a)
        try:
            result = rule(node, *args)
        except (TypeError, ValueError, AttributeError):
            result = None
        env[node] = result
        return result

    return visit(mask)


def _canonical(expr):
    return expr.replace(lambda e: e.is_Relational, lambda e: e.canonical)


def _opaque(*exprs) -> list:
    """The formulas with each runtime value (a tensor read at an index: an applied function) replaced by an integer
    symbol of its own. sympy's simplify mishandles applied undefined functions in relations (1.14 turns
    `(X3 <= f()) & (X3 > f() - 3)` into `(X3 < f()) & ...`); and what holds for every value of a free integer
    holds for every tensor's values (the runtime tensors are integer or bool)."""
    atoms = sorted(set().union(*(e.atoms(AppliedUndef) for e in exprs)), key=str)
    symbols = {atom: sympy.Symbol(f"_runtime{k}", integer=True) for k, atom in enumerate(atoms)}
    return [e.xreplace(symbols) for e in exprs]


def _differ_somewhere(expr, target, samples: int = 16) -> bool:
    """Whether the two formulas (runtime values opaque) differ at one of a few fixed integer points: a cheap
    refutation, so that the candidates a formula is not are dropped before sympy's proof (seconds for a windowed
    mask's dozen candidates). Never a proof of equality."""
    symbols = sorted(expr.free_symbols | target.free_symbols, key=str)
    for k in range(samples):
        point = {sym: (k * 7 + 3 * i) % 23 + (1 if sym.is_positive else 0 if sym.is_nonnegative else -6)
                 for i, sym in enumerate(symbols)}  # (each symbol within its assumptions: sizes are positive)
        a, b = expr.xreplace(point), target.xreplace(point)
        if a in (sympy.true, sympy.false) and b in (sympy.true, sympy.false) and a != b:
            return True
    return False


def equivalent(expr, target) -> bool:
    """Whether two boolean formulas of the index symbols agree everywhere (relations as canonical atoms). sympy's
    proof is remembered (pattern_cache) under the formulas' full text: the same mask in the next process is not
    proved again."""
    expr, target = _opaque(expr, target)
    if _differ_somewhere(expr, target):
        return False
    return pattern_cache.remembered("equivalent", f"{sympy.srepr(expr)} == {sympy.srepr(target)}",
                                    lambda: _prove_equivalent(expr, target))


def _prove_equivalent(expr, target) -> bool:
    expr, target = _canonical(sympy.simplify(expr)), _canonical(target)
    return sympy.simplify_logic(sympy.Xor(expr, target)) == sympy.false


def structure(formula: Formula, sq, skv, batch=None) -> Optional[tuple[bool, int, Optional[str],
                                                                        Optional[sympy.Basic]]]:
    """(causal, window, keys, positions) if the mask formula, broadcast to [B, H, Sq, Skv], is exactly one of
      - no mask; causal / causal + sliding window with Sq and Skv the same size (bottom-right = top-left):
        positions None;
      - `j <= P(i)` (causal) and optionally `j > P(i) - window`, where the query positions P are a formula of the
        query index and of 1-D runtime tensors read at it -- what HF builds from cache_position for a StaticCache,
        whose Skv is the cache length -- or, in a formula with no runtime tensor but the key padding and with Sq
        and Skv of sizes that may differ, of the query index and integers (`i + c`: HF's StaticCache prefill with
        padding, Sq queries at 0..Sq-1 of the cache): positions P (Sq and Skv may differ);
    with `keys` (a runtime tensor's node name) also `keys[b, j] != 0` -- key padding from the user's attention_mask.
    Else None. Exact for every size and every value of the runtime tensors. `batch` is the attention's batch size:
    where it and the mask's are 1, the broadcast reads keys at row 0 (`keys[0, j]`), which is `keys[b, j]` for the
    one b."""
    if formula.rank > 4:
        return None
    shape = [1] * (4 - formula.rank) + list(formula.shape)  # SDPA broadcasts a lower-rank mask from the right
    # and reads element 0 of a size-1 dim for every index there (`am[:1, None, None, :]` is row 0 for each batch)
    expr = _pinned(_shift(formula, 4 - formula.rank), shape)
    if expr.has(X(1)) or not (same_size(sq, shape[2]) or shape[2] == 1) or not same_size(skv, shape[3]):
        return None
    i, j = X(2), X(3)
    keys, padding = _key_padding(expr, batch_of_one=shape[0] == 1 and batch is not None and same_size(batch, 1))
    core = sympy.simplify(expr.xreplace({padding: sympy.true})) if keys is not None else expr
    if core.has(X(0)):
        return None
    index_only = not core.atoms(AppliedUndef)
    if index_only:
        candidates = [(False, 0, sympy.true)]  # (no mask: whatever the alignment)
        if same_size(sq, skv):
            candidates += [(True, 0, sympy.Le(j, i))]
            candidates += [(True, w, sympy.And(sympy.Gt(j, i - w), sympy.Le(j, i)))
                           for w in _window_candidates(core, i, j)]
        for causal, window, allowed in candidates:
            if equivalent(expr, sympy.And(allowed, padding)):  # the proof: the whole formula, padding included
                return causal, window, keys, None
        if same_size(sq, skv):
            return None  # (as many queries as keys: bottom-right is the alignment; a look-ahead stays a tensor)
    for positions in _position_candidates(core, i, j, index_only):
        candidates = [(0, sympy.Le(j, positions))]
        candidates += [(w, sympy.And(sympy.Gt(j, positions - w), sympy.Le(j, positions)))
                       for w in _window_candidates(core, i, j, positions)]
        for window, allowed in candidates:
            if equivalent(expr, sympy.And(allowed, padding)):
                return True, window, keys, positions
    return None


def _key_padding(expr, batch_of_one: bool = False) -> tuple[Optional[str], sympy.Basic]:
    """(name, atom) when the formula has one atom `name(X0, X3) != 0`: a [B, Skv] tensor read at (batch, key) --
    or, with `batch_of_one` (a batch of 1, which the broadcast pins to index 0), `name(0, X3) != 0`; else
    (None, true)."""
    reads = [(X(0), X(3))] + ([(sympy.Integer(0), X(3))] if batch_of_one else [])
    atoms = [a for a in expr.atoms(sympy.Rel) if isinstance(a, sympy.Ne) and a.rhs == 0
             and isinstance(a.lhs, AppliedUndef) and a.lhs.args in reads]
    if len(atoms) != 1:
        return None, sympy.true
    return atoms[0].lhs.func.__name__, atoms[0]


def position_terms(expr) -> Optional[list[tuple[int, sympy.Basic]]]:
    """expr as (integer, factor) terms, each factor 1, the query index X2, a 0-d runtime tensor (`f()`: a cache's
    write counter), or a 1-D one read at X2 or at a fixed element (`f(X2)`, `f(0)`: a size-1 dim reads element 0):
    what mask_analysis can compute as a [Sq] tensor of query positions. None for anything else."""
    terms = []
    for term in sympy.Add.make_args(sympy.expand(expr)):
        coeff, factor = term.as_coeff_Mul()
        runtime = isinstance(factor, AppliedUndef) and (not factor.args or len(factor.args) == 1 and (
            factor.args[0] == X(2) or (factor.args[0].is_Integer and factor.args[0] >= 0)))
        if not coeff.is_Integer or not (factor == 1 or factor == X(2) or runtime):
            return None
        terms.append((int(coeff), factor))
    return terms


def _position_candidates(core, i, j, index_only: bool = False) -> list:
    """Formulas P for which `j <= P` could be one of the formula's relations, each of the query index and of runtime
    tensors read at it (`position_terms`) -- with `index_only`, of the query index and integers alone (`i + c`: a
    StaticCache's prefill, its queries at 0..Sq-1 of a longer cache)."""
    out = []
    for atom in core.atoms(sympy.Rel):
        diff = sympy.expand(atom.lhs - atom.rhs)
        coeff = diff.coeff(j)
        rest = sympy.expand(diff - coeff * j)
        if abs(coeff) != 1 or rest.has(j, X(0), X(1)):
            continue
        for bound in (-rest * coeff, -rest * coeff - 1):  # j <= bound or j < bound + 1, whichever the atom says
            source = bound.has(i) if index_only else bound.atoms(AppliedUndef)  # (never a constant: one per row)
            if position_terms(bound) is not None and source and bound not in out:
                out.append(bound)
    return out


def _window_candidates(expr, i, j, positions=None) -> list[int]:
    """Integers w for which `j > P - w` could be one of the formula's relations (P: the query positions, i
    without them)."""
    position = i if positions is None else positions
    out = []
    for atom in expr.atoms(sympy.Rel):
        diff = sympy.expand(atom.lhs - atom.rhs)
        if abs(diff.coeff(j)) != 1:
            continue
        for sign in (1, -1):  # j - P + w or P - w - j, as the relation is written
            rest = sympy.expand(sign * diff - j + position)
            if rest.is_Integer:
                out += [int(abs(rest)), int(abs(rest)) + 1]
    return sorted({w for w in out if w > 0})
