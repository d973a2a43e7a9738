"""Fusion patterns: what to find in the graph and the Mojo op to put in its place.

A pattern is two plain Python functions -- `search`, the code you want to find, and `replace`, the code to run
instead -- plus example inputs to trace them with. `register_pattern` is the public API; the built-in patterns
(one file per fusion family in this package) use it too.

The engine is Inductor's pattern matcher (`torch._inductor.pattern_matcher.register_replacement`), fed with our
own trace function: the search function is traced to pre-dispatch ATen and canonicalised exactly like the model
graph, so a pattern matches what its Python says. Inductor then re-traces each candidate with the real (symbolic)
shapes and dtypes and compares again, which rejects near-misses such as a different cast target or reduction dim.
Scalars such as eps are captured from the graph (`scalars=`), never burned in.
"""
from __future__ import annotations

import collections
import fnmatch
import functools
import importlib
import inspect
import logging
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch
from torch.fx import GraphModule, Node
from torch.fx.experimental.proxy_tensor import make_fx

from ..canonicalize import canonicalize

log = logging.getLogger("mojo_compile")

__all__ = ["Pattern", "PatternError", "register_pattern", "unregister_pattern", "registered_patterns",
           "trace_pre_dispatch", "rewrite", "symbolic_scalar", "match_value", "with_signature", "unmodelled_kwarg",
           "mark_grad_inputs", "needs_grad"]

BUILTIN_MODULES = ("add_rms_norm", "rms_norm", "gated_act", "rope", "attention")


class PatternError(ValueError):
    """A pattern that cannot be registered: bad signature, unknown scalar, or a search function that fails to trace."""


@dataclass
class Pattern:
    name: str
    search: Callable
    replace: Callable
    example_inputs: list[tuple]
    scalars: dict[str, float] = field(default_factory=dict)
    extra_check: Optional[Callable[[Any], bool]] = None
    priority: int = 0
    family: str = ""
    tell_tales: tuple = ()
    _passes: Optional[list] = None  # [(pattern size in nodes, PatternMatcherPass)], one per example input set

    def enabled(self, disabled: Sequence[str]) -> bool:
        return not any(fnmatch.fnmatchcase(self.name, d) or self.family == d for d in disabled)


_PATTERNS: dict[str, Pattern] = {}
_SEEN_GRAPHS: dict = collections.defaultdict(list)  # (fp32 forms of different spellings often trace alike)
_SOURCES: dict = {}  # matched input nodes -> nn_module_stack of the matched code, until its Mojo op takes it


def trace_pre_dispatch(fn: Callable, args: Sequence[Any], **_: Any) -> GraphModule:
    """How patterns are traced: the model graph's IR (pre-dispatch ATen), canonicalised the same way."""
    with torch.enable_grad():  # a no_grad caller must not change what is traced
        gm = make_fx(fn, pre_dispatch=True)(*args)
    canonicalize(gm)
    return gm


def _as_input_sets(example_inputs) -> list[tuple]:
    if isinstance(example_inputs, list) and example_inputs and all(isinstance(e, tuple) for e in example_inputs):
        return example_inputs
    return [tuple(example_inputs)]


def register_pattern(
    name: str,
    search: Callable,
    replace: Callable,
    example_inputs,
    *,
    scalars: Optional[dict[str, float]] = None,
    extra_check: Optional[Callable[[Any], bool]] = None,
    priority: int = 0,
    family: Optional[str] = None,
    tell_tales: Sequence = (),
    lazy: bool = False,
) -> Pattern:
    """Register a fusion: wherever the graph computes `search(*inputs)`, compute `replace(*inputs)` instead.

    example_inputs: a tuple of tensors to trace `search` with (one per tensor parameter, scalars excluded), or a
        list of such tuples: one trace each, e.g. per dtype, since a bf16 spelling carries casts an fp32 one lacks.
    scalars: {parameter: trace value} for non-tensor parameters read from the graph (eps, ...). Pick trace values
        that occur nowhere else in the pattern.
    extra_check: called with the Inductor `Match` (`match.kwargs` holds the bound parameters, as nodes or values);
        return False to leave a site alone.
    priority: higher runs first. Within a priority, larger patterns run first (so add + norm before norm).
    family: the group a pattern belongs to (`options={"disable": [family or name glob]}` turns it off).
    tell_tales: ATen ops whose presence after rewriting means a site of this family was left unfused (reported).
    lazy: trace on first use instead of now (the built-ins use this to keep `import mojo_compile` fast).
    """
    scalars = dict(scalars or {})
    params = list(inspect.signature(search).parameters)
    if list(inspect.signature(replace).parameters) != params:
        raise PatternError(f"pattern {name!r}: search{tuple(params)} and replace"
                           f"{tuple(inspect.signature(replace).parameters)} must take the same parameters")
    unknown = set(scalars) - set(params)
    if unknown:
        raise PatternError(f"pattern {name!r}: scalars {sorted(unknown)} are not parameters of search{tuple(params)}")
    input_sets = _as_input_sets(example_inputs)
    for inputs in input_sets:
        if len(inputs) != len(params) - len(scalars):
            raise PatternError(f"pattern {name!r}: {len(inputs)} example inputs for the {len(params) - len(scalars)} "
                               f"non-scalar parameters of search{tuple(params)}")
    pattern = Pattern(name, search, replace, input_sets, scalars, extra_check, priority,
                      family or name.split(".")[0], tuple(tell_tales))
    if not lazy:
        _compile(pattern)
    _PATTERNS[name] = pattern
    return pattern


def unregister_pattern(name: str) -> None:
    _PATTERNS.pop(name)


@functools.lru_cache(maxsize=None)
def _load_builtins() -> None:
    for module in BUILTIN_MODULES:
        importlib.import_module(f".{module}", __name__)


def registered_patterns() -> list[Pattern]:
    """All patterns, in the order they are applied (priority, then registration)."""
    _load_builtins()
    return sorted(_PATTERNS.values(), key=lambda p: -p.priority)


def _register_replacement_kwargs() -> set:
    from torch._inductor.pattern_matcher import register_replacement
    return set(inspect.signature(register_replacement).parameters)


def _compile(pattern: Pattern) -> None:
    """Trace each input set of the pattern into its own PatternMatcherPass, remembering the pattern's size."""
    from torch._inductor import pattern_matcher as pm

    optional = {"skip_duplicates": True}
    optional = {k: v for k, v in optional.items() if k in _register_replacement_kwargs()}
    passes = []
    for inputs in pattern.example_inputs:
        pattern_pass = pm.PatternMatcherPass(pass_name=f"mojo:{pattern.name}")
        if optional:  # one record of traced graphs for all passes: a graph another pattern registered is skipped
            pattern_pass.seen_patterns = _SEEN_GRAPHS
        try:
            expr = pm.register_replacement(
                pattern.search, pattern.replace, list(inputs), trace_pre_dispatch, pattern_pass,
                extra_check=functools.partial(_check_and_note_source, pattern), scalar_workaround=pattern.scalars,
                **optional)
        except Exception as e:  # a user's search function that does not trace must say which pattern it is
            raise PatternError(f"pattern {pattern.name!r} failed to trace with inputs "
                               f"{[_describe(i) for i in inputs]}: {type(e).__name__}: {e}") from e
        if expr:  # False: the same graph as an input set already registered
            passes.append((_size(expr), pattern_pass))
    pattern._passes = passes


def unmodelled_kwarg(match) -> Optional[str]:
    """Why `match` computes something its pattern does not, where a matched node carries a keyword argument its
    pattern node leaves out (None if none does). Inductor's matcher compares only the keyword arguments a pattern
    names, so `torch.add(x, r, alpha=2)` would match `x + r`, and `mean(..., dtype=torch.float64)` a plain mean.
    A keyword left at its schema default computes the same and passes."""
    from torch._inductor import pattern_matcher as pm

    for expr, node in match.ctx.pattern_to_node.items():
        if not isinstance(expr, pm._TargetArgsExpr) or not isinstance(node, Node) or node.op != "call_function":
            continue
        for key, value in node.kwargs.items():
            if key in expr.kwargs or _is_schema_default(node.target, key, value):
                continue
            return f"{node.format_node()}: {key}={value!r} is not in the pattern"
    return None


def _written_later(match) -> Optional[str]:
    """A matched output that an in-place op writes afterwards (`h = x + r; y = norm(h); h.mul_(2)`): the Mojo op
    saves some outputs for its backward, where eager saved a copy, so leave such a site to eager."""
    from ..canonicalize import _touched_by_mutation

    for out in match.output_nodes():
        if isinstance(out, Node) and _touched_by_mutation(out):
            return f"{out.name} is written in place later"
    return None


def _is_schema_default(target, key: str, value) -> bool:
    schema = getattr(target, "_schema", None)
    for argument in (schema.arguments if schema is not None else ()):
        if argument.name == key:
            return argument.has_default_value() and argument.default_value == value
    return False


def _check_and_note_source(pattern: Pattern, match) -> bool:
    """The shared soundness checks (unmodelled_kwarg), then the pattern's extra_check; on success, note the module
    the matched code came from, keyed by the matched input nodes, for the Mojo op that replaces it (Inductor does
    not carry that metadata over in every version)."""
    reason = unmodelled_kwarg(match) or _written_later(match)
    if reason is not None:
        log.debug("mojo pattern %s: no match: %s", pattern.name, reason)
        return False
    if pattern.extra_check is not None and not pattern.extra_check(match):
        return False
    _claim_sources(match.nodes[0].graph)  # before this match's replacement rewrites the inputs of earlier ops
    outputs = [n for n in match.output_nodes() if n is not None]
    producers = [n.args[0] for n in outputs if n.target is operator.getitem and isinstance(n.args[0], Node)]
    for node in [*outputs, *producers, *match.nodes]:  # the module of the outputs' code first
        if node.meta.get("nn_module_stack"):
            _SOURCES[_input_key(match.kwargs.values())] = node.meta["nn_module_stack"]
            break
    return True


def _claim_sources(graph) -> None:
    for node in graph.nodes:
        if node.op == "call_function" and getattr(node.target, "namespace", None) == "mojo" \
                and "nn_module_stack" not in node.meta:
            stack = _SOURCES.pop(_input_key(node.args), None) \
                or _SOURCES.pop(_input_key(_through_views(node.args)), None)
            if stack is not None:
                node.meta["nn_module_stack"] = stack


_VIEWS = {torch.ops.aten.view.default, torch.ops.aten.reshape.default, torch.ops.aten.transpose.int,
          torch.ops.aten.unsqueeze.default}


def _through_views(args) -> list:
    """A replacement may view its inputs before the op (q.view(B, S, H, D)): key on the viewed tensors."""
    return [a.args[0] if isinstance(a, Node) and a.op == "call_function" and a.target in _VIEWS else a for a in args]


def _input_key(values) -> frozenset:
    return frozenset(v for v in values if isinstance(v, Node))


def _size(expr) -> int:
    """Nodes in a pattern expression: larger patterns are applied first (maximal munch)."""
    from torch._inductor import pattern_matcher as pm

    seen, stack = set(), list(getattr(expr, "outputs", None) or [expr])
    while stack:
        e = stack.pop()
        if isinstance(e, pm.CallFunction) and id(e) not in seen:
            seen.add(id(e))
            stack.extend(a for a in (*e.args, *e.kwargs.values()) if isinstance(a, pm.PatternExpr))
    return len(seen)


def _describe(x) -> str:
    return f"{x.dtype}{list(x.shape)}" if isinstance(x, torch.Tensor) else repr(x)


def _mojo_nodes(gm: GraphModule) -> set[Node]:
    return {n for n in gm.graph.nodes if n.op == "call_function" and getattr(n.target, "namespace", None) == "mojo"}


def rewrite(gm: GraphModule, disabled: Sequence[str] = ()) -> list[tuple[Pattern, Node]]:
    """Apply every enabled pattern: by priority, then larger patterns first, so that a spelling with its casts wins
    over the fp32 form of another spelling that would match only its inside, and add + norm over norm.
    Returns (pattern, new Mojo op node) per match."""
    from torch._inductor.pattern_matcher import stable_topological_sort

    gm.graph.__dict__.pop("_mojo_touched", None)  # _touched_by_mutation's memo: computed anew for this graph
    passes = []
    for pattern in registered_patterns():
        if pattern.enabled(disabled):
            if pattern._passes is None:
                _compile(pattern)
            passes.extend((pattern, size, pattern_pass) for size, pattern_pass in pattern._passes)
    matches = []
    for pattern, _, pattern_pass in sorted(passes, key=lambda p: (-p[0].priority, -p[1])):
        before = _mojo_nodes(gm)
        if pattern_pass.apply(gm.graph):
            # A replacement with several outputs goes where the matcher puts it, which can precede the producer of
            # an input that the matched code reads later (q's rotation written before k's projection): reorder.
            stable_topological_sort(gm.graph)
            _claim_sources(gm.graph)
            for node in _mojo_nodes(gm) - before:
                node.meta["mojo_pattern"] = pattern.name
                _inherit_module_stack(node)
                matches.append((pattern, node))
    _SOURCES.clear()
    gm.graph.__dict__.pop("_mojo_touched", None)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    live = set(gm.graph.nodes)  # a later pattern may have consumed an earlier one's op (qk-norm + rope)
    return [(pattern, node) for pattern, node in matches if node in live]


def _inherit_module_stack(node: Node) -> None:
    """The module of the code the op replaced becomes the op's own (noted at match time, else taken from the getitem
    users, to which some Inductor versions copy the replaced outputs' metadata)."""
    if "nn_module_stack" in node.meta:
        return
    for user in node.users:
        if "nn_module_stack" in user.meta:
            node.meta.setdefault("nn_module_stack", user.meta["nn_module_stack"])
            node.meta.setdefault("stack_trace", user.meta.get("stack_trace"))
            return


GRAD_INPUT = "mojo_requires_grad"  # node.meta flag: a graph input (or attribute) the caller's autograd differentiates
_GRAD_CUTS = {torch.ops.aten.detach.default, torch.ops.aten.lift_fresh_copy.default}


def mark_grad_inputs(gm: GraphModule, example_inputs: Sequence) -> None:
    """Flag the placeholders (and parameter attributes) whose tensors require grad. The pre-dispatch trace's fake
    values say requires_grad=False for every input, so checks must ask needs_grad, which reads these flags."""
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    for node, value in zip(placeholders, example_inputs):
        if isinstance(value, torch.Tensor) and value.requires_grad:
            node.meta[GRAD_INPUT] = True
    for node in gm.graph.find_nodes(op="get_attr"):
        value = gm
        for name in str(node.target).split("."):  # a submodule's parameter: "layers.0.bias"
            value = getattr(value, name, None)
        if isinstance(value, torch.Tensor) and value.requires_grad:
            node.meta[GRAD_INPUT] = True


def needs_grad(value) -> bool:
    """Whether autograd may want a gradient for the tensor node `value`: it is computed from a flagged input
    (mark_grad_inputs) other than through detach. A superset (grad mode is not tracked): a caller refuses a fusion
    whose op gives that input no gradient."""
    if not isinstance(value, Node):
        return False
    stack, seen = [value], set()
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node.meta.get(GRAD_INPUT):
            return True
        if node.op == "call_function" and node.target in _GRAD_CUTS:
            continue
        stack.extend(n for n in node.all_input_nodes)
    return False


def match_value(match, name: str):
    """The (fake) value a pattern parameter was bound to in `match`; None where it is absent or not a node."""
    node = match.kwargs.get(name)
    return node.meta.get("val") if isinstance(node, Node) else None


def with_signature(fn: Callable, params: Sequence[str], defaults: Optional[dict] = None) -> Callable:
    """`fn` with the named signature `params` (Inductor binds pattern inputs by name). fn either takes `*args` in that
    order, or names its own parameters, which are filled by name from `params` (and `defaults` for the others)."""
    own = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_POSITIONAL for p in own.values()):
        def bound(*args):
            return fn(*args)
    else:
        def bound(*args):
            values = {**(defaults or {}), **dict(zip(params, args))}
            return fn(*(values.get(n) for n in own))
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    bound.__signature__ = inspect.Signature([inspect.Parameter(p, kind) for p in params])
    return bound


def symbolic_scalar(match, name: str) -> bool:
    """True when a scalar parameter is computed by the graph (a SymFloat from torch.compile(dynamic=True)) rather
    than a literal. (Some torch versions re-match literals exactly and leave them out of match.kwargs.)"""
    return isinstance(match.kwargs.get(name), (Node, torch.SymFloat, torch.SymInt))
