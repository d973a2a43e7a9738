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
import contextlib
import difflib
import fnmatch
import functools
import importlib
import inspect
import logging
import operator
import pkgutil
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch
from torch.fx import GraphModule, Node
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .. import pattern_cache
from ..canonicalize import canonicalize
from ..dtensor import is_dtensor_value

log = logging.getLogger("mojo_compile")

__all__ = ["Pattern", "PatternError", "register_pattern", "unregister_pattern", "registered_patterns",
           "trace_pre_dispatch", "rewrite", "symbolic_scalar", "match_value", "with_signature", "unmodelled_kwarg",
           "mark_grad_inputs", "needs_grad", "refuse", "accepted_match", "load_fusions", "dtensor_reason",
           "autocast_reason", "GraphPass", "register_graph_pass", "registered_graph_passes"]

ENTRY_POINT_GROUP = "mojo_compile.fusions"  # a package's fusion module, imported after the built-ins


def _builtin_modules() -> tuple[str, ...]:
    """This package's modules, in name order: each built-in family's patterns register beside their definition
    when its module is imported (no list to edit; a module without patterns registers none). Where two families'
    patterns could match one site, their priorities order them, not the module names."""
    return tuple(sorted(info.name for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_")))


BUILTIN_MODULES = _builtin_modules()


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
    optional: tuple = ()  # tensor parameters that may bind None too
    builtin: bool = False  # registered by this package: its registration traces may come from pattern_cache
    _sets: Optional[list] = None  # one _InputSet per example input set (None: none registered, nothing known)
    # The graphs this pattern's input sets traced to, for Inductor's skip_duplicates (a set that traces like an
    # earlier set of the same pattern is applied by that set's pass). A user's pattern keeps its own record: were
    # it shared, a pattern whose search traces like another's would never run, whatever its priority, and stay
    # dead when the other is disabled, refuses the site, or is unregistered. Built-ins share _SEEN_GRAPHS.
    _seen_graphs: dict = field(default_factory=lambda: collections.defaultdict(list))
    _without_backward: Optional[tuple] = None  # the replacement's ops autograd cannot differentiate (traced once)
    _traced_with: Optional[list] = None  # the values of the latest trace of one of its functions (_Tracer)
    _search_params: Optional[tuple] = None  # the search function's parameter names (read once)

    @property
    def tensor_params(self) -> list[str]:
        """The search function's parameters traced with a tensor (the scalars and any other constant left out)."""
        names = [p for p in inspect.signature(self.search).parameters if p not in self.scalars]
        return [name for name, value in zip(names, self.example_inputs[0]) if isinstance(value, torch.Tensor)]

    def enabled(self, disabled: Sequence[str]) -> bool:
        return not any(self.disabled_by(d) for d in disabled)

    def disabled_by(self, entry: str) -> bool:
        """Whether a `disable` entry turns this pattern off: a glob over its name, or its family; an entry "=name"
        is that exact name only (no glob, no family), for a pattern named like a family (bisect uses it)."""
        if entry.startswith("="):
            return self.name == entry[1:]
        return fnmatch.fnmatchcase(self.name, entry) or self.family == entry


_PATTERNS: dict[str, Pattern] = {}


@dataclass
class GraphPass:
    """A rewrite a pattern cannot express, run over the rewritten graph (register_graph_pass)."""
    name: str
    fn: Callable[[GraphModule], Sequence[Node]]
    family: str = ""

    enabled = Pattern.enabled
    disabled_by = Pattern.disabled_by


_GRAPH_PASSES: dict[str, GraphPass] = {}


def register_graph_pass(name: str, fn: Callable[[GraphModule], Sequence[Node]], *, family: Optional[str] = None,
                        replace: bool = False) -> GraphPass:
    """Register `fn(gm)`, run at the end of every `rewrite()` (after all patterns, in registration order) unless
    disabled: it rewrites gm.graph in place and returns the Mojo op nodes it added, which the report counts as
    matches of `name` (the nodes it removed drop out of the report as a later stage's do). For a fusion a pattern
    cannot express, e.g. independent ops of one input made one op (patterns/linear.py: q, k, v projections -> one
    launch). `options={"disable": [...]}` turns it off by a glob over its name or by its family (default: the name's
    first part), like a pattern. A name taken is a PatternError unless replace=True."""
    if not isinstance(name, str) or not name:
        raise PatternError(f"a graph pass name must be a non-empty string, got {name!r}")
    if name in _GRAPH_PASSES and not replace:
        raise PatternError(f"a graph pass named {name!r} is already registered: pass replace=True to replace it")
    graph_pass = GraphPass(name, fn, family or name.split(".")[0])
    _GRAPH_PASSES[name] = graph_pass
    registry_changed(f"graph pass {name!r} registered")
    return graph_pass


_COMPILES = {"done": 0}  # mojo backend compiles finished (see compiling())
_COMPILING = threading.local()  # .depth: mojo backend compiles running on this thread


@contextlib.contextmanager
def compiling():
    """Around each mojo backend compile: a registry change made while one runs on the same thread (the built-ins and
    fusion plug-ins loading on first need) is part of that compile, not a change after it. Per thread: a change
    another thread makes during this compile is a change after the compiles done before."""
    _COMPILING.depth = getattr(_COMPILING, "depth", 0) + 1
    try:
        yield
    finally:
        _COMPILING.depth -= 1
        _COMPILES["done"] += 1


def registry_changed(what: str) -> None:
    """A pattern, graph pass or canonicalisation rule was added, replaced or removed. After a compile, this drops
    Dynamo's compiled code (torch._dynamo.reset_code_caches()): that cache is guarded on the code, the inputs and the
    backend with its options, not on our registry, so a new torch.compile of the same function (or the next call of
    one compiled before) would run code rewritten under the old registry -- a removed fusion still running, a new
    one ignored. Everything compiled so far, by any backend, is compiled again on its next call. Only the code
    caches: a full torch._dynamo.reset() would also clear the Triton kernels a compiled graph's lazily compiled
    backward still looks up, and tear down CUDA-graph trees."""
    if _COMPILES["done"] and not getattr(_COMPILING, "depth", 0):
        log.info("mojo: %s after a compile: Dynamo's code caches reset, so that compiled code follows the change",
                 what)
        torch._dynamo.reset_code_caches()


def registered_graph_passes() -> list[GraphPass]:
    """The graph passes, in the order rewrite() runs them (registration)."""
    _load_builtins()
    return list(_GRAPH_PASSES.values())


# The built-ins' shared record of traced graphs: the fp32 forms of different spellings often trace alike, and one
# pass applies them all (fewer matcher passes per compile); their priorities and checks are written for it.
_SEEN_GRAPHS: dict = collections.defaultdict(list)
_SOURCES: dict = {}  # matched input nodes -> nn_module_stack of the matched code, until its Mojo op takes it
_RETRACES: dict = {}  # (tracer, static argument description) -> search re-trace, within one rewrite()


def trace_pre_dispatch(fn: Callable, args: Sequence[Any], **_: Any) -> GraphModule:
    """How patterns are traced: the model graph's IR (pre-dispatch ATen), canonicalised the same way."""
    with torch.enable_grad():  # a no_grad caller must not change what is traced
        gm = make_fx(fn, pre_dispatch=True)(*args)
    canonicalize(gm)
    return gm


def _autocast_on(device: str) -> bool:
    try:
        return torch._C._is_autocast_available(device) and torch.is_autocast_enabled(device)
    except RuntimeError:  # a device type this torch does not know (npu without torch_npu)
        return False


_AUTOCAST_DEVICES = ("cpu", "cuda", "xpu", "npu", "mps", "hpu", "mtia", "xla")


def _registration_trace(fn: Callable, args: Sequence[Any]) -> GraphModule:
    """A pattern's registration trace, the same whatever compile first needs it: outside any ambient autocast, which
    would change the pattern (the fp32 LM head's logits traced bf16 keep a `.float()` the fp32 form has not: the
    fusion missed). The trace is kept on disk (pattern_cache) for later processes too. (The per-candidate re-traces
    follow the compile's autocast, as the graph's values do.)"""
    with contextlib.ExitStack() as stack:
        for device in _AUTOCAST_DEVICES:
            if _autocast_on(device):
                stack.enter_context(torch.autocast(device, enabled=False))
        return trace_pre_dispatch(fn, args)


class _Tracer:
    """The trace function one pattern input set hands Inductor's register_replacement, which calls it
      - first to trace the search function for registration: from pattern_cache for a built-in pattern;
      - then per candidate match, to re-trace the search function with the candidate's shapes and dtypes: reused
        within one rewrite() for candidates whose arguments have the same static sizes, strides and dtypes (the
        same site in the next layer), traced anew where any size is symbolic;
      - and per accepted match, to trace the replacement: always anew (its graph's values belong to that match)."""

    def __init__(self, pattern: Pattern):
        self.pattern = pattern
        self.registration_trace: Optional[GraphModule] = None

    def __call__(self, fn: Callable, args: Sequence[Any], **_: Any) -> GraphModule:
        self.pattern._traced_with = list(args)  # a candidate's re-trace is followed by its check (_rebound)
        if self.registration_trace is None:
            if self.pattern.builtin:
                self.registration_trace = pattern_cache.traced(self.pattern.name, _registration_trace, fn, args)
            else:
                self.registration_trace = _registration_trace(fn, args)
            return self.registration_trace
        if fn is not self.pattern.search:
            return trace_pre_dispatch(fn, args)
        try:
            key = (id(self), repr([pattern_cache.describe_argument(a) for a in args]))
        except pattern_cache.Unkeepable:
            return self.retrace(args)
        if key not in _RETRACES:
            _RETRACES[key] = self.retrace(args)
        return _RETRACES[key]

    def retrace(self, args: Sequence[Any]) -> GraphModule:
        """The search function re-traced with a candidate's values. Inductor takes only a RuntimeError for "no
        match": a candidate that binds a float to a parameter traced as a tensor (`x * 0.5` for `x * weight`)
        fails in the search function's tensor code (`weight.to(...)`) with another exception, which would fail the
        compile; any failure of the re-trace means the candidate is not the pattern's computation."""
        try:
            return trace_pre_dispatch(self.pattern.search, args)
        except RuntimeError:
            raise
        except Exception as e:  # noqa: BLE001 - see above
            raise RuntimeError(f"{self.pattern.name}: the candidate's values do not trace the search function "
                               f"({type(e).__name__}: {e})") from e


@dataclass(eq=False)
class _InputSet:
    """One example-input set of a pattern: Inductor's registration of its trace, made on first need. A rewrite
    registers only the sets whose ops all occur in the graph, where their summary (`targets`, `size`) is known
    from an earlier process (pattern_cache.summaries): a pattern can match only a graph that has every op it is
    made of, and registering the ~250 built-in sets costs more than the whole rewrite of a graph."""
    inputs: tuple
    targets: Optional[frozenset] = None  # the names of the ops the pattern is made of (None: not known yet)
    size: int = 0  # nodes in the pattern: within a priority, larger patterns apply first
    registered: bool = False
    pattern_pass: Any = None  # Inductor's PatternMatcherPass; None when registered as the same graph as an earlier
    #                           set's (Inductor's skip_duplicates: that set's pass applies it)


def _target_name(target) -> str:
    """A graph node's target as a name that is the same in every process (`aten.mul.Tensor`, `_operator.getitem`)."""
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    return f"{getattr(target, '__module__', None)}.{getattr(target, '__qualname__', None) or repr(target)}"


def graph_targets(graph) -> frozenset:
    """The names of the call_function targets in `graph`."""
    return frozenset(_target_name(n.target) for n in graph.nodes if n.op == "call_function")


_IGNORED_TYPES = (int, float, list, torch.device, torch.dtype)  # what register_replacement's pattern leaves unmatched


def _pattern_summary(expr) -> tuple[frozenset, int]:
    """(targets, size) of an Inductor pattern: the names of the ops it matches -- each of its CallFunctions matches
    a graph node of exactly that target, so a graph without one of them has no match -- and its size (_size)."""
    from torch._inductor import pattern_matcher as pm
    from torch.utils import _pytree as pytree

    targets, seen = set(), set()
    stack = list(getattr(expr, "outputs", None) or [expr])
    while stack:
        e = stack.pop()
        if isinstance(e, pm.PatternExpr) and id(e) not in seen:
            seen.add(id(e))
            if isinstance(e, pm.CallFunction):
                targets.update(_target_name(fn) for fn in e.fns)
                stack.extend(pytree.tree_leaves((e.args, e.kwargs)))
    return frozenset(targets), _size(expr)


def _as_input_sets(example_inputs) -> list[tuple]:
    if isinstance(example_inputs, list) and example_inputs and all(isinstance(e, tuple) for e in example_inputs):
        return example_inputs
    return [tuple(example_inputs)]


PRIORITY_RANGE = (-1000, 1000)  # register_pattern's priority= (the built-ins use -10 .. 20)


def register_pattern(
    name: str,
    search: Callable,
    replacement: Callable,
    example_inputs,
    *,
    scalars: Optional[dict[str, float]] = None,
    extra_check: Optional[Callable[[Any], bool]] = None,
    priority: int = 0,
    family: Optional[str] = None,
    tell_tales: Sequence = (),
    optional: Sequence[str] = (),
    lazy: bool = False,
    replace: bool = False,
) -> Pattern:
    """Register a fusion: wherever the graph computes `search(*inputs)`, compute `replacement(*inputs)` instead.

    example_inputs: a tuple of tensors to trace `search` with (one per tensor parameter, scalars excluded), or a
        list of such tuples: one trace each, e.g. per dtype, since a bf16 spelling carries casts an fp32 one lacks.
    scalars: {parameter: trace value} for non-tensor parameters read from the graph (eps, ...). Pick trace values
        that occur nowhere else in the pattern.
    extra_check: called with the Inductor `Match` (`match.kwargs` holds the bound parameters, as nodes or values);
        return False -- or `refuse("why")`, which the near-miss report shows -- to leave a site alone.
    priority: higher runs first. Within a priority, larger patterns run first (so add + norm before norm). An int
        from -1000 to 1000 (PRIORITY_RANGE).
    family: the group a pattern belongs to (`options={"disable": [family or name glob]}` turns it off).
    tell_tales: ATen ops whose presence after rewriting means a site of this family was left unfused (reported).
    optional: tensor parameters that may also bind None (an optional argument such as cross_entropy's weight, the
        check then deciding from the matched node). Any other tensor parameter binds only a tensor of the graph:
        Inductor's matcher would bind it to a None or a Python number as well, which is another computation.
    lazy: trace on first use instead of now (the built-ins use this to keep `import mojo_compile` fast).
    replace: replace the pattern registered under `name` (a built-in too). Without it a name already taken -- by
        a built-in as well, loaded or not yet -- is a PatternError.
    """
    if not isinstance(replace, bool):
        raise PatternError(f"pattern {name!r}: replace= is the flag that allows replacing a registered pattern "
                           f"(True/False), got {replace!r}; the replacement function is the third argument")
    builtin = _called_from_builtin()
    if not builtin:
        _load_builtins()  # the names the built-ins take are taken even before the first compile loads them
    if not isinstance(name, str) or not name:
        raise PatternError(f"a pattern name must be a non-empty string, got {name!r}")
    if name in _PATTERNS and not replace:
        raise PatternError(f"a pattern named {name!r} is already registered"
                           f"{' (built-in)' if name in _BUILTIN_NAMES else ''}: pass replace=True to replace it, "
                           f"or unregister_pattern({name!r}) first")
    priority = _checked_priority(name, priority)
    scalars = dict(scalars or {})
    params = list(inspect.signature(search).parameters)
    if list(inspect.signature(replacement).parameters) != params:
        raise PatternError(f"pattern {name!r}: search{tuple(params)} and replace"
                           f"{tuple(inspect.signature(replacement).parameters)} must take the same parameters")
    unknown = (set(scalars) | set(optional)) - set(params)
    if unknown:
        raise PatternError(f"pattern {name!r}: scalars / optional {sorted(unknown)} are not parameters of "
                           f"search{tuple(params)}")
    input_sets = _as_input_sets(example_inputs)
    for inputs in input_sets:
        if len(inputs) != len(params) - len(scalars):
            raise PatternError(f"pattern {name!r}: {len(inputs)} example inputs for the {len(params) - len(scalars)} "
                               f"non-scalar parameters of search{tuple(params)}")
    pattern = Pattern(name, search, replacement, input_sets, scalars, extra_check, priority,
                      family or name.split(".")[0], tuple(tell_tales), tuple(optional), builtin)
    if name in _PATTERNS:  # replace=True: the old one's traces must not make the new one's look like duplicates
        _forget_traces(_PATTERNS[name])
    if not lazy:
        _compile(pattern)
    _PATTERNS[name] = pattern  # a replaced pattern keeps its place in the registration order
    if builtin:
        _BUILTIN_NAMES.add(name)
    else:
        _BUILTIN_NAMES.discard(name)
    registry_changed(f"pattern {name!r} registered")
    return pattern


def unregister_pattern(name: str) -> Pattern:
    """Remove the pattern `name` (a built-in too, also before the first compile loads the built-ins) and return it.
    An unknown name is a PatternError naming the closest registered ones."""
    _load_builtins()  # else a built-in not loaded yet would be unknown now, and back after the first compile
    if name not in _PATTERNS:
        close = closest_names(name, with_families=False)
        raise PatternError(f"no pattern named {name!r} is registered"
                           + (f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else
                              " (registered_patterns() lists them)"))
    pattern = _PATTERNS.pop(name)
    _BUILTIN_NAMES.discard(name)
    _forget_traces(pattern)
    registry_changed(f"pattern {name!r} unregistered")
    return pattern


_BUILTIN_NAMES: set[str] = set()  # names registered by the built-in modules (for messages)
_BUILTIN_MODULE_NAMES = frozenset(f"{__name__}.{module}" for module in BUILTIN_MODULES)


def _called_from_builtin() -> bool:
    """Whether register_pattern was called by a built-in pattern module. Those register while they are imported --
    by _load_builtins, or directly (backend.py imports attention) -- in that order, and must not load the others
    first; a user's registration loads all built-ins first, so a name a built-in takes is taken."""
    frame = sys._getframe(2)  # register_pattern's caller
    return frame.f_globals.get("__name__") in _BUILTIN_MODULE_NAMES


def _checked_priority(name: str, priority) -> int:
    low, high = PRIORITY_RANGE
    if not isinstance(priority, bool):
        try:
            value = operator.index(priority)  # an int (numpy's too), not a float
        except TypeError:
            value = None
        if value is not None and low <= value <= high:
            return value
    raise PatternError(f"pattern {name!r}: priority must be an int from {low} to {high}, got {priority!r}")


def _forget_traces(pattern: Pattern) -> None:
    """Drop the graphs a removed pattern recorded in _SEEN_GRAPHS, where a later registration of the same search
    (after unregister_pattern, or with replace=True) would be skipped as a duplicate of a pattern that is gone.
    (Keyed by the pattern's printed form: an equal-looking entry of another pattern may go too, which only lets a
    later duplicate trace be registered.)"""
    from torch._inductor.pattern_matcher import PatternPrettyPrinter

    pattern._seen_graphs.clear()  # (a user pattern's own record: every set it holds is dropped with the sets)
    for item in pattern._sets or ():
        for entries in (item.pattern_pass.patterns.values() if item.pattern_pass is not None else ()):
            for entry in entries:
                try:
                    _SEEN_GRAPHS.pop(PatternPrettyPrinter.run(entry.pattern), None)
                except Exception:  # a torch whose printer differs: at worst a re-registration is skipped
                    pass


def disable_matches(entry: str) -> bool:
    """Whether a `disable` entry (options["disable"], MOJO_DISABLE) turns off any registered pattern (or graph
    pass)."""
    return any(p.disabled_by(entry) for p in [*registered_patterns(), *registered_graph_passes()])


def families() -> list[str]:
    return sorted({pattern.family for pattern in registered_patterns()})


def closest_names(word: str, n: int = 3, with_families: bool = True) -> list[str]:
    """The registered pattern names (and families) closest to `word`, for error messages."""
    patterns = registered_patterns()
    candidates = {p.name for p in patterns} | ({p.family for p in patterns} if with_families else set())
    return difflib.get_close_matches(word, sorted(candidates), n=n)


def load_fusions() -> None:
    """Import every fusion module -- the built-ins, then the entry points' -- once: their patterns, and any
    canonicalisation rules they add, are in place (patterns register lazily: nothing is traced here)."""
    _load_builtins()


@contextlib.contextmanager
def _default_float32():
    """The built-ins' example inputs and search functions are written for torch's default dtype, fp32: a script's
    `torch.set_default_dtype(torch.bfloat16)` must not change what they are made of or trace to."""
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        yield
    finally:
        torch.set_default_dtype(saved)


@functools.lru_cache(maxsize=None)
def _load_builtins() -> None:
    with _default_float32():
        for module in BUILTIN_MODULES:
            importlib.import_module(f".{module}", __name__)
    _load_entry_points()


_ENTRY_POINTS_LOADED = False


def _load_entry_points() -> None:
    """Fusions of other packages: each entry point of the group `mojo_compile.fusions` names a module (or a
    callable) whose import (or call) registers its ops, patterns and implementations through the same API as the
    built-ins. One that fails to load is logged and skipped: the built-ins still run. Once per process: a fusion's
    own register_pattern comes back here through _load_builtins (whose cache fills only when it returns)."""
    global _ENTRY_POINTS_LOADED
    if _ENTRY_POINTS_LOADED:
        return
    _ENTRY_POINTS_LOADED = True
    from importlib.metadata import entry_points

    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = point.load()
            if callable(loaded):
                loaded()
        except Exception as e:  # a broken plug-in must not break compilation
            log.warning("mojo: the fusion %r (entry point of %s) failed to load: %s: %s", point.name,
                        ENTRY_POINT_GROUP, type(e).__name__, e)


def registered_patterns() -> list[Pattern]:
    """All patterns, in the order they are applied (priority, then registration)."""
    _load_builtins()
    return sorted(_PATTERNS.values(), key=lambda p: -p.priority)


def _register_replacement_kwargs() -> set:
    from torch._inductor.pattern_matcher import register_replacement
    return set(inspect.signature(register_replacement).parameters)


def forget_traces() -> None:
    """Every pattern traced again on next use (a canonicalisation rule added since changes what its trace is)."""
    for pattern in _PATTERNS.values():
        _forget_traces(pattern)
        pattern._sets = None


def _input_sets(pattern: Pattern) -> list[_InputSet]:
    """The pattern's input sets, with their summaries where an earlier process recorded them (built-ins only)."""
    if pattern._sets is None:
        known = pattern_cache.summaries().get(pattern.name) if pattern.builtin and pattern_cache.enabled() else None
        if known is not None and len(known) != len(pattern.example_inputs):
            known = None  # not this pattern's record
        pattern._sets = [_InputSet(inputs, *(known[i] if known else (None, 0)))
                         for i, inputs in enumerate(pattern.example_inputs)]
    return pattern._sets


def _register(pattern: Pattern, item: _InputSet) -> None:
    """Register one input set's trace with Inductor in its own PatternMatcherPass, and learn its summary."""
    from torch._inductor import pattern_matcher as pm

    optional = {"skip_duplicates": True}
    optional = {k: v for k, v in optional.items() if k in _register_replacement_kwargs()}
    pattern_pass = pm.PatternMatcherPass(pass_name=f"mojo:{pattern.name}")
    if optional:  # a graph that a set of the same record registered is skipped (Pattern._seen_graphs says why)
        pattern_pass.seen_patterns = _SEEN_GRAPHS if pattern.builtin else pattern._seen_graphs
    tracer = _Tracer(pattern)
    try:
        with _default_float32() if pattern.builtin else contextlib.nullcontext():
            expr = pm.register_replacement(
                pattern.search, pattern.replace, list(item.inputs), tracer, pattern_pass,
                extra_check=functools.partial(_check_and_note_source, pattern), scalar_workaround=pattern.scalars,
                **optional)
    except Exception as e:  # a user's search function that does not trace must say which pattern it is
        raise PatternError(f"pattern {pattern.name!r} failed to trace with inputs "
                           f"{[_describe(i) for i in item.inputs]}: {type(e).__name__}: {e}") from e
    if not expr:  # the same graph as a set registered before, which applies it: its pattern, for the summary
        expr = pm.fx_to_pattern(tracer.registration_trace, ignore_types=_IGNORED_TYPES,
                                scalar_workaround=pattern.scalars)
        pattern_pass = None
    item.targets, item.size = _pattern_summary(expr)
    item.registered, item.pattern_pass = True, pattern_pass
    if pattern.builtin and all(i.registered for i in pattern._sets):
        pattern_cache.note_summary(pattern.name, [(i.targets, i.size) for i in pattern._sets])


def _compile(pattern: Pattern) -> None:
    """Register every input set of the pattern not registered yet, in order."""
    for item in _input_sets(pattern):
        if not item.registered:
            _register(pattern, item)


def warm_cache() -> int:
    """Trace every input set of every built-in pattern into the pattern cache (and its summaries), as a first
    compile in a fresh cache directory does: for a container image or a CI runner to pay that fixed cost when it
    is built (`mojo-compile warm-cache`). Returns the number of input sets; raises RuntimeError where the cache
    is off or a user's canonicalisation rule makes traces unkeepable."""
    if not pattern_cache.enabled():
        raise RuntimeError("the pattern cache is off (MOJO_PATTERN_CACHE=0)")
    if not pattern_cache.keeps_traces():
        raise RuntimeError("a canonicalisation rule mojo_compile did not register itself is registered: traces are "
                           "not kept")
    builtins = [p for p in registered_patterns() if p.builtin]
    for pattern in builtins:
        _compile(pattern)
    pattern_cache.save_summaries()
    return sum(len(p._sets) for p in builtins)


def registered_passes(chosen: Sequence[Pattern]) -> list[tuple[Pattern, int, Any]]:
    """(pattern, size, PatternMatcherPass) of every input set of `chosen` (registered now where not yet), in the
    order a rewrite applies them (near_miss.py explains unfused sites with all of them)."""
    for pattern in chosen:
        _compile(pattern)
    pattern_cache.save_summaries()
    passes = [(p, item.size, item.pattern_pass) for p in chosen for item in p._sets if item.pattern_pass is not None]
    return sorted(passes, key=lambda t: (-t[0].priority, -t[1]))


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


def _not_a_tensor(pattern: Pattern, match) -> Optional[str]:
    """Why `match` binds a parameter the pattern traced as a tensor to something else (None if it does not):
    Inductor's KeywordArg matches any value, so `F.layer_norm(x, s, weight, bias)` would match a call whose bias is
    None, and `x * weight` a product with a Python float. Such a call is another computation (its own pattern, or
    eager's). Some torch versions hand extra_check the match of a re-trace with the bound values, in which a None
    is a constant and its parameter is missing: missing counts as None. A pattern's `optional` parameters may be
    None (their check reads the matched node)."""
    for name in pattern.tensor_params:
        value = match.kwargs.get(name, _UNBOUND)
        if not isinstance(value, Node) and not (name in pattern.optional and value in (None, _UNBOUND)):
            bound = "left out of the match" if value is _UNBOUND else f"bound to {value!r}"
            return f"{name}, traced as a tensor, is {bound}: not the computation the pattern models"
    return None


_UNBOUND = object()


def _mixed_dtensors(match) -> Optional[str]:
    """Why `match` reads DTensors beside plain tensors (None if it does not): a DTensor op refuses plain tensor
    arguments ("mixed torch.Tensor and DTensor"), where the matched ops ran as eager runs them -- the loss on
    vocabulary shards under `loss_parallel()`, with plain labels, is DTensor's own (its loss on the shards)."""
    if not any(is_dtensor_value(v) for v in match.kwargs.values()):
        return None  # (every match outside a graph of DTensors)
    tensors = {name: v for name, v in match.kwargs.items()
               if isinstance(v, Node) and isinstance(v.meta.get("val"), torch.Tensor)}
    dtensors = sorted(name for name, v in tensors.items() if is_dtensor_value(v))
    if len(dtensors) == len(tensors):
        return None
    plain = sorted(set(tensors) - set(dtensors))
    return f"{', '.join(dtensors)} {'is a DTensor' if len(dtensors) == 1 else 'are DTensors'} and " \
           f"{', '.join(plain)} plain: the Mojo op would meet both, which DTensor refuses; left to DTensor"


def dtensor_reason(match, names: Sequence[str], ops: str) -> Optional[str]:
    """For the extra_check of a pattern whose ops declare no DTensor sharding (sharding.py): why the match is left to
    DTensor (None where none of the parameters `names` is bound to a DTensor value): such an op would raise on
    DTensors where eager's ops run."""
    on_dtensors = [name for name in names if is_dtensor_value(match.kwargs.get(name))]
    if not on_dtensors:
        return None
    return f"{', '.join(on_dtensors)}: a DTensor; {ops} declare no sharding, so this is left to DTensor"


def weight_only_grad_reason(match, activations: Sequence[str], params: Sequence[str]) -> Optional[str]:
    """Why an op that returns an activation (the residual sum) would mark it as requiring grad where eager does not:
    a parameter wants a gradient, none of the activations the sum is made of does."""
    if any(needs_grad(match.kwargs.get(p)) for p in params) and not any(
            needs_grad(match.kwargs.get(a)) for a in activations):
        return "only a parameter wants a gradient: eager's sum requires none, the op's outputs all would"
    return None


def autocast_reason(match, x, consequence: str) -> Optional[str]:
    """For the extra_check of a pattern whose matched code autocast changes but whose op does not follow it (a
    projection: linear, matmul and mm are on autocast's lower-precision list, and eager casts x and w to autocast's
    dtype there; a Mojo op without an Autocast kernel computes in x's): why the matched nodes run under an autocast
    region of another dtype than x's (x: the fake value of the input autocast would cast), or None. The region is
    the ambient one at compile time (Dynamo guards it) or one the graph enters (`_enter_autocast` ...
    `_exit_autocast`, nested `enabled=False` included), read off the graph: inside a region the traced values'
    dtypes do not show autocast. The reason reads "autocast to <dtype>: <consequence>" (decode linears, the LM head
    with the loss)."""
    device = x.device.type
    if not torch._C._is_autocast_available(device):
        return None
    stack = [torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None]
    graph = match.nodes[0].graph
    enter = getattr(torch.amp.autocast_mode, "_enter_autocast", None)
    if stack[0] is None and enter is not None and not graph.find_nodes(op="call_function", target=enter):
        return None  # no autocast at all (every match of a graph without it: no walk over the graph per match)
    matched = set(match.nodes)
    for n in graph.nodes:
        name = getattr(n.target, "__name__", "") if n.op == "call_function" else ""
        if name == "_enter_autocast":  # (device_type, dtype, enabled, cache_enabled)
            region, dtype, enabled = (*n.args[:3], *(None, None, True)[len(n.args[:3]):])
            if region != device:
                stack.append(stack[-1])
            else:
                stack.append((dtype or torch.get_autocast_dtype(device)) if enabled else None)
        elif name == "_exit_autocast" and len(stack) > 1:
            stack.pop()
        elif n in matched and stack[-1] not in (None, x.dtype):
            return f"autocast to {stack[-1]}: {consequence}"
    return None


def _written_later(match) -> Optional[str]:
    """A matched output that an in-place op writes afterwards (`h = x + r; y = norm(h); h.mul_(2)`), or an input the
    matched code reads that one writes after the match (`y = norm(h); h.mul_(2)`): the Mojo op saves its inputs and
    some outputs for its backward, where eager's ops saved copies of their own, and AOTAutograd refuses a saved
    tensor written in place. Leave such a site to eager. (A write before the match -- StaticCache's index_copy_
    into the cache attention then reads -- is no conflict.)"""
    from ..canonicalize import _touched_by_mutation, storage_of, written_by

    for out in match.output_nodes():
        if isinstance(out, Node) and _touched_by_mutation(out):
            return f"{out.name} is written in place later"
    inputs = [v for v in match.kwargs.values() if isinstance(v, Node) and _touched_by_mutation(v)]
    if not inputs:
        return None
    storages = [storage_of(v) for v in inputs]
    graph = match.nodes[0].graph
    order = {n: i for i, n in enumerate(graph.nodes)}
    last = max(order[n] for n in match.nodes if n in order)
    for node in graph.nodes:
        if order[node] <= last or node.op != "call_function":
            continue
        for written in written_by(node):
            written_storage = storage_of(written)
            for v, storage in zip(inputs, storages):  # aliases by the view chain, or by the storage (inputs that
                # are views of one another)
                if _alias_root(written) is _alias_root(v) or (storage is not None and storage == written_storage):
                    return f"{v.name}, an input, is written in place after it is read ({node.format_node()})"
    return None


def _alias_root(node: Node) -> Node:
    """The tensor `node` is a view of, through every view (itself if none): two nodes alias if their roots agree."""
    from ..canonicalize import _view_base

    while _view_base(node) is not None:
        node = _view_base(node)
    return node


def _is_schema_default(target, key: str, value) -> bool:
    schema = getattr(target, "_schema", None)
    for argument in (schema.arguments if schema is not None else ()):
        if argument.name == key:
            return argument.has_default_value() and argument.default_value == value
    return False


_REFUSAL: dict = {"reason": None, "verdict": None}  # refuse()'s last reason; the last (pattern name, reason or None)
_CHECKING: dict = {}  # the pattern whose match is being checked (traced_scalar reads its re-trace's values)


_ACCEPTED: dict = {"match": None}


def accepted_match():
    """In a replacement function: the Inductor `Match` being replaced (its extra_check has just accepted it: the
    matcher replaces each match right after checking it), for a decision the traced values cannot carry -- e.g.
    whether autograd will want a gradient (needs_grad(match.kwargs[...])). None outside a replacement."""
    return _ACCEPTED["match"]


def refuse(reason: str) -> bool:
    """For an extra_check: `return refuse("why")` leaves the site alone, like `return False`, and says why (the
    near-miss report of an unfused site shows the reason; near_miss.py)."""
    _REFUSAL["reason"] = reason
    return False


def _check_name(check: Callable) -> str:
    fn = getattr(check, "func", check)  # a functools.partial
    return getattr(fn, "__name__", None) or type(fn).__name__


def _check_and_note_source(pattern: Pattern, match) -> bool:
    """The shared soundness checks (unmodelled_kwarg), then the pattern's extra_check; on success, note the module
    the matched code came from, keyed by the matched input nodes, for the Mojo op that replaces it (Inductor does
    not carry that metadata over in every version). The verdict -- (pattern name, None or why it refused) -- is
    left in _REFUSAL["verdict"], for near_miss.py."""
    _REFUSAL["reason"] = None
    _CHECKING["pattern"] = pattern
    reason = _not_a_tensor(pattern, match) or unmodelled_kwarg(match) or _written_later(match) or \
        _mixed_dtensors(match) or _no_backward(pattern, match)
    if reason is None and pattern.extra_check is not None and not pattern.extra_check(match):
        reason = _REFUSAL["reason"] or f"extra_check {_check_name(pattern.extra_check)} refused"
    reason = reason or _rebound(pattern, match)  # (last: a pattern's own reason says it in its terms)
    _REFUSAL["verdict"] = (pattern.name, reason)
    _ACCEPTED["match"] = match if reason is None else None
    if reason is not None:
        log.debug("mojo pattern %s: no match: %s", pattern.name, reason)
        return False
    _claim_sources(match.nodes[0].graph)  # before this match's replacement rewrites the inputs of earlier ops
    outputs = [n for n in match.output_nodes() if n is not None]
    producers = [n.args[0] for n in outputs if n.target is operator.getitem and isinstance(n.args[0], Node)]
    for node in [*outputs, *producers, *match.nodes]:  # the module of the outputs' code first
        if node.meta.get("nn_module_stack"):
            _SOURCES[_input_key(match.kwargs.values())] = node.meta["nn_module_stack"]
            break
    return True


def _rebound(pattern: Pattern, match) -> Optional[str]:
    """Why the check's match binds a tensor parameter to a value other than the one the search function was re-traced
    with (None if none does). Inductor re-traces the search function with the first match's values and matches that
    trace again, but builds the replacement from the first match's bindings, so both must bind the same values. The
    first match ignores dtype constants: a model's `w.to(bf16)` matches a pattern's `weight.to(torch.float32)` with
    weight bound to the fp32 w. In the re-trace with that w the cast is a no-op, which canonicalisation drops, and the
    check binds weight to the cast's bf16 output: the replacement would read the unrounded w. Compared: dtype, device,
    sizes and strides (the re-trace's values are empty tensors of exactly those)."""
    for name, value in _retraced_values(pattern).items():
        bound = match.kwargs.get(name)
        if not isinstance(value, torch.Tensor) or not isinstance(bound, Node):
            continue
        val = bound.meta.get("val")
        same = isinstance(val, torch.Tensor) and val.dtype == value.dtype and val.device == value.device and \
            val.dim() == value.dim() and all(statically_known_true(a == b) for a, b in zip(
                (*val.shape, *val.stride()), (*value.shape, *value.stride())))
        if not same:
            what = f"{val.dtype} {list(val.shape)}" if isinstance(val, torch.Tensor) else repr(val)
            return (f"{name} was traced as {value.dtype} {list(value.shape)} and the match binds it to {bound.name} "
                    f"({what}): not the value the replacement would read")
    return None


def _retraced_values(pattern: Pattern) -> dict:
    """The search function's parameters -> the values of its latest trace (the candidate's re-trace, which Inductor
    runs just before the check), or {} before any."""
    traced = pattern._traced_with
    if traced is None:
        return {}
    if pattern._search_params is None:
        pattern._search_params = tuple(inspect.signature(pattern.search).parameters)
    names = pattern._search_params
    return dict(zip(names, traced[len(traced) - len(names):]))  # (a symbolic re-trace's sizes come first)


def _no_backward(pattern: Pattern, match) -> Optional[str]:
    """Why a user's replacement cannot take this site (None if it can): an input wants a gradient and the
    replacement calls an op with no autograd formula (a custom op registered for inference only). Eager
    differentiates the matched code; the fused graph would raise in the backward. The built-ins' extra_checks
    decide this themselves, op by op."""
    if pattern.builtin or not any(needs_grad(v) for v in match.kwargs.values()):
        return None
    if pattern._without_backward is None:
        pattern._without_backward = _ops_without_backward(pattern)
    if pattern._without_backward:
        return f"an input needs a gradient and {', '.join(pattern._without_backward)} has no autograd formula"
    return None


# An op differentiates where it has a kernel for one of these (its own formula, per device or for all, or a
# decomposition autograd goes through).
_AUTOGRAD_KEYS = ("Autograd", "AutogradCPU", "AutogradCUDA", "AutogradXPU", "AutogradMPS", "AutogradPrivateUse1",
                  "CompositeImplicitAutograd")


def _ops_without_backward(pattern: Pattern) -> tuple:
    """The custom ops that pattern.replace calls (traced once per example input set: a replacement may call another
    op per dtype) that have no autograd formula: a torch.library.custom_op without register_autograd, or a library
    op with no Autograd kernel."""
    from torch._library import custom_ops
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    params = list(inspect.signature(pattern.replace).parameters)
    missing = []
    for inputs in pattern.example_inputs:
        tensors = iter(inputs)
        args = [pattern.scalars[p] if p in pattern.scalars else next(tensors) for p in params]
        # On fake copies of the example inputs (a CPU example of an op registered for the GPU alone must trace;
        # nothing runs for real), outside the compile's own fake mode and tracing context (a match is checked inside
        # a compile: make_fx would otherwise take the context's fake mode, and a replacement that reads a size --
        # `x[..., x.shape[-1] // 2:]` -- would leave the compile guards on symbols it has no source for).
        try:
            with unset_fake_temporarily(), torch._guards.tracing(None), torch.enable_grad():
                graph = make_fx(pattern.replace, tracing_mode="fake", pre_dispatch=True)(*args).graph
        except Exception as e:  # noqa: BLE001 - a replacement that does not trace alone: unknown, so not fused
            return (f"the replacement (it does not trace alone: {type(e).__name__})",)
        for node in graph.nodes:
            op = node.target
            if node.op != "call_function" or not isinstance(op, torch._ops.OpOverload) \
                    or op.namespace in ("aten", "prims") or str(op) in missing:
                continue
            opdef = custom_ops.OPDEFS.get(op._schema.name)
            if opdef is not None:
                differentiable = getattr(opdef, "_backward_fn", None) is not None
            else:
                differentiable = any(torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), key)
                                     for key in _AUTOGRAD_KEYS)
            if not differentiable:
                missing.append(str(op))
    return tuple(missing)


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
    Then the enabled graph passes (register_graph_pass). Returns (pattern or graph pass, new Mojo op node) per
    match."""
    from torch._inductor.pattern_matcher import stable_topological_sort

    gm.graph.__dict__.pop("_mojo_touched", None)  # _touched_by_mutation's memo: computed anew for this graph
    _RETRACES.clear()
    sets = [(pattern, item) for pattern in registered_patterns() if pattern.enabled(disabled)
            for item in _input_sets(pattern)]
    present = graph_targets(gm.graph)
    if any(not item.registered and item.targets is None for _, item in sets):
        present = None  # a set without a summary: register every set, as the first process does
    _register_ready(sets, present)
    matches = []
    for pattern, item in sorted(sets, key=lambda s: (-s[0].priority, -s[1].size)):
        if item.pattern_pass is None:
            continue  # not registered (some op of it is not in the graph), or the same graph as another set's
        before, existing = _mojo_nodes(gm), set(gm.graph.nodes)
        if item.pattern_pass.apply(gm.graph):
            for node in gm.graph.nodes:  # every node a replacement added names its pattern (mojo-compile verify)
                if node not in existing:
                    node.meta.setdefault("mojo_pattern", pattern.name)
            # A replacement with several outputs goes where the matcher puts it, which can precede the producer of
            # an input that the matched code reads later (q's rotation written before k's projection): reorder.
            stable_topological_sort(gm.graph)
            _claim_sources(gm.graph)
            for node in _mojo_nodes(gm) - before:
                node.meta["mojo_pattern"] = pattern.name
                _inherit_module_stack(node)
                matches.append((pattern, node))
            if present is not None:  # a replacement's ops (mojo.rope, ...) are what a later pattern may be made of
                present = graph_targets(gm.graph)
                _register_ready(sets, present)
    for graph_pass in registered_graph_passes():  # after every pattern: they see the Mojo ops the patterns made
        if graph_pass.enabled(disabled):
            for node in graph_pass.fn(gm) or ():
                node.meta["mojo_pattern"] = graph_pass.name
                matches.append((graph_pass, node))
    pattern_cache.save_summaries()
    _SOURCES.clear()
    _RETRACES.clear()  # (the graphs hold this graph's fake values)
    gm.graph.__dict__.pop("_mojo_touched", None)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    live = set(gm.graph.nodes)  # a later pattern may have consumed an earlier one's op (qk-norm + rope)
    return [(pattern, node) for pattern, node in matches if node in live]


def _register_ready(sets: list, present: Optional[frozenset]) -> None:
    """Register, in registration order, each set not registered yet whose ops all occur in `present` (every set
    where `present` is None). Registration order decides which of two sets with the same graph applies it (the
    first); such sets are made of the same ops, so they become ready together and keep that order."""
    for pattern, item in sets:
        if not item.registered and (present is None or item.targets <= present):
            _register(pattern, item)


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
    """Flag the placeholders (and parameter attributes) whose tensors require grad, where grad mode is on (Dynamo
    calls the backend in the caller's grad mode; AOTAutograd reads it too, for a training or an inference graph).
    The pre-dispatch trace's fake values say requires_grad=False for every input, so checks must ask needs_grad,
    which reads these flags."""
    if not torch.is_grad_enabled() and not gm.graph.find_nodes(op="call_function",
                                                               target=torch._C._set_grad_enabled):
        return  # no_grad throughout: no gradient is ever asked for (an enable_grad region inside: flagged as usual)
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    for node, value in zip(placeholders, example_inputs):
        if isinstance(value, torch.Tensor) and value.requires_grad:
            node.meta[GRAD_INPUT] = True
    for node in gm.graph.find_nodes(op="get_attr"):
        try:
            value = operator.attrgetter(str(node.target))(gm)  # a submodule's parameter: "layers.0.bias"
        except AttributeError:
            continue
        if isinstance(value, torch.Tensor) and value.requires_grad:
            node.meta[GRAD_INPUT] = True


def _in_place_writers(graph) -> list:
    """The in-place ops of `graph` with the tensors each writes (written_by), their alias roots and storages."""
    from ..canonicalize import storage_of, written_by

    out = []
    for node in graph.nodes:
        written = written_by(node) if node.op == "call_function" else []
        if written:
            roots = {_alias_root(w) for w in written}
            storages = {storage_of(w) for w in written} - {None}
            out.append((node, roots, storages))
    return out


def needs_grad(value) -> bool:
    """Whether autograd may want a gradient for the tensor node `value`: it is computed from a flagged input
    (mark_grad_inputs) other than through detach. A superset (grad mode is not tracked): a caller refuses a fusion
    whose op gives that input no gradient.

    Beside the producers, the walk follows the in-place writes into each tensor's alias set (a written tensor with
    the same alias root, or the same traced storage): `h[0] = x[0]`, `h.narrow(0, 0, 1).copy_(x)`,
    `torch._foreach_add_([h], [x])` write h through a view (or a list) and leave later reads of h on h's own node,
    whose producers have no grad input; the writer's inputs are then inputs of h. Every writer in the graph counts,
    before or after the read (a superset: a missed fusion, never a fusion without the gradient)."""
    if not isinstance(value, Node):
        return False
    from ..canonicalize import storage_of

    writers = None
    stack, seen = [value], set()
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node.meta.get(GRAD_INPUT):
            return True
        if writers is None:
            writers = _in_place_writers(node.graph)
        if writers:
            root, storage = _alias_root(node), storage_of(node)
            for writer, roots, storages in writers:
                if writer not in seen and (root in roots or (storage is not None and storage in storages)):
                    stack.append(writer)  # its inputs (the values written) reach node's values
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


def traced_scalar(match, name: str):
    """The value of a pattern's scalar parameter in this match: from match.kwargs, or, where Inductor's re-check
    matched the literal itself (leaving it out of match.kwargs), the value the search function was re-traced with.
    None if neither has it."""
    if name in match.kwargs:
        return match.kwargs[name]
    pattern = _CHECKING.get("pattern")
    return None if pattern is None else _retraced_values(pattern).get(name)


def symbolic_scalar(match, name: str) -> bool:
    """True when a scalar parameter is computed by the graph (a SymFloat from torch.compile(dynamic=True)) rather
    than a literal. (Some torch versions re-match literals exactly and leave them out of match.kwargs.)"""
    return isinstance(match.kwargs.get(name), (Node, torch.SymFloat, torch.SymInt))
