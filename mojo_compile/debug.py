"""Debugging a compiled model that is wrong: verify, bisect and diff (the `mojo-compile` commands, and their API).

While a debug command watches (`watching()`), the backend hands each graph it compiles to a `Watch`: the graph
before canonicalisation, before rewriting and after, and the compiled function. On that function's first call,
before it runs, the Watch checks the rewrite on the call's inputs:

  each fused site   The site is the connected set of nodes the rewrite added (the Mojo op, its getitems, views
                    and epilogues, the key-padding nodes the mask analysis added). Its inputs are the graph's
                    values in the unrewritten graph, so a site is checked alone, not with the error of the sites
                    upstream. Its outputs are compared with the values the nodes it replaced had there.
                    With grad, the gradients of its floating inputs for a random output gradient too.
  the whole graph   The compiled function's outputs against the Dynamo graph run eagerly.

The rule, per output: as accurate as eager. Against the same computation in fp64 (the unrewritten graph with every
floating value and dtype argument made fp64), the fused value's normwise relative error must be at most twice
eager's plus a floor for the output dtype -- one rounding in that dtype, more for fp32's reduction orders (the
rule of the conformance suite). And per element, as a norm dilutes an error confined to a few elements: each
element's error against fp64 must be at most ELEMENT_FACTOR x (eager's own error at that element + one ulp of the
fp64 value in the output dtype), plus the normwise allowance spread evenly (bound x the rms of the fp64 values x
sqrt(2 ln n), the expected largest of n normal samples); the worst element is named (index, fused, eager, fp64).
NaN and +-inf must be where eager has them. Graphs with random ops (dropout in training) are not compared as a
whole; their sites are.

bisect compiles the graph again with a prefix of the ordered list of rewrites enabled -- the enabled patterns in
applying order, then the enabled graph passes in run order -- each other one disabled by its exact name ("=name",
so a pattern named like a family does not take the family with it): a binary search for the first rewrite whose
enabling makes the graph differ. It then names the culprit's sites that fail alone. diff prints each graph before
and after rewriting as a unified diff of pre-dispatch ATen code.

Cost: a watched graph runs several times on its first call and keeps every value of the unrewritten graph while it
checks; fine for a debug run, not for production.
"""
from __future__ import annotations

import contextlib
import copy
import difflib
import logging
import math
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
from torch.fx import GraphModule, Node
from torch.utils import _pytree as pytree

from . import report as report_mod

log = logging.getLogger("mojo_compile")

# The floor of the accuracy rule: one rounding of the output (normwise, half an ulp: 2^-9 for bf16, 2^-12 for fp16),
# and for fp32 the spread of reduction orders between two correct kernels (the conformance suite's value).
FLOOR = {torch.float64: 1e-12, torch.float32: 1e-6, torch.float16: 2.5e-4, torch.bfloat16: 2e-3}
# The elementwise rule's factor over eager's own error at the element (plus one ulp). One element's error is a single
# sample, not a norm: a correct kernel that sums in another order or rounds at other points has, at a given element,
# an error of a few times eager's there (the norm of the normwise rule averages that out, and allows 2x). 8 = 4 x that
# 2 keeps the margin for this per-element spread; a wrong element (a flipped sign, a shifted index, a skipped tail)
# is off by about the value itself, hundreds of ulps in bf16 and far more in fp32, so it still stands out.
ELEMENT_FACTOR = 8
GRAD_SEED = 0x6D6F6A6F  # the output gradients' seed in the gradient checks
_RANDOM_OPS = {"native_dropout", "bernoulli", "rand", "randn", "rand_like", "randn_like", "randint", "randperm",
               "multinomial", "normal", "uniform", "exponential"}


# ------------------------------------------------------------------------------------------------------ results
@dataclass
class Check:
    """One comparison: a site's output (or input gradient), or a whole graph's output."""
    graph: str
    site: str  # module path of the site; "(graph)" for the whole graph
    pattern: str
    op: str
    target: str
    kernel: str
    what: str  # "out 0", "grad q" ...
    dtype: str
    max_abs: float  # against eager
    rel: float  # normwise, against eager
    err: float  # normwise, against fp64
    bound: float  # 2 x eager's error against fp64 + the dtype's floor
    ok: bool
    note: str = ""
    # the element furthest over its elementwise allowance: |fused - fp64| / allowance (over 1 fails), and where
    elem: float = 0.0
    element: str = ""

    def reason(self) -> str:
        """Why the check failed, in words (empty when it passed)."""
        if self.ok:
            return ""
        if self.note:
            return self.note
        if self.elem > 1.0:
            return f"{self.element} is {self.elem:.3g}x its elementwise allowance"
        return f"err fp64 {self.err:.2e} > bound {self.bound:.2e}"


@dataclass
class Verification:
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def table(self) -> str:
        if not self.checks:
            return "mojo-compile verify: nothing was compared (no graph compiled with backend='mojo' ran)"
        head = ("graph", "site", "pattern", "op", "target", "kernel", "what", "dtype", "max abs", "rel",
                "err fp64", "bound", "elem", "")
        rows = [head] + [(c.graph, c.site, c.pattern, c.op, c.target, c.kernel or "-", c.what, c.dtype,
                          f"{c.max_abs:.2e}", f"{c.rel:.2e}", f"{c.err:.2e}", f"{c.bound:.2e}", f"{c.elem:.2f}",
                          ("OK" if c.ok else "FAIL") + (f" ({c.note})" if c.note else "")) for c in self.checks]
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
        floors = ", ".join(f"{str(d).replace('torch.', '')} {f:g}" for d, f in FLOOR.items())
        lines.append(f"rule: err fp64 <= bound = 2 x eager's error against fp64 + floor ({floors})")
        lines.append(f"      and per element, elem = |fused - fp64| / ({ELEMENT_FACTOR} x (|eager - fp64| + ulp(fp64)) "
                     "+ bound x rms(fp64) x sqrt(2 ln n)) <= 1")
        lines += [f"{c.graph} {c.site} {c.what}: {c.reason()}" for c in self.checks if c.elem > 1.0]
        lines += [f"note: {n}" for n in self.notes]
        lines.append(f"{len(self.checks) - len(self.failures)} OK, {len(self.failures)} FAIL")
        return "\n".join(lines)


@dataclass
class BisectResult:
    graph: str = ""
    differs: bool = False
    pattern: str = ""  # the culprit ("" when the graph differs with every pattern off)
    sites: list[Check] = field(default_factory=list)  # the culprit's sites that differ alone (else all of them)
    message: str = ""

    def text(self) -> str:
        lines = [f"graph {self.graph} differs from eager. {self.message}".rstrip()]
        if self.pattern:
            lines.append(f"culprit pattern: {self.pattern}")
        for c in self.sites:
            lines.append(f"  site {c.site}: op {c.op}, target {c.target}, kernel {c.kernel or '-'}"
                         + (f" ({c.what}: {c.reason()})" if not c.ok else ""))
        return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------ watching
_WATCHERS: list["Watcher"] = []


@dataclass
class Watcher:
    grad: bool = False
    bisect: bool = False
    watches: list["Watch"] = field(default_factory=list)
    verification: Verification = field(default_factory=Verification)
    bisects: list[BisectResult] = field(default_factory=list)


@contextlib.contextmanager
def watching(grad: bool = False, bisect: bool = False):
    """Within this block every graph backend='mojo' compiles is checked on its first call (see the module doc)."""
    watcher = Watcher(grad, bisect)
    _WATCHERS.append(watcher)
    try:
        yield watcher
    finally:
        _WATCHERS.remove(watcher)


class Watch:
    """What the backend tells a debug command about one graph. `Watch.start` returns a no-op one unless watched."""

    active = False

    @staticmethod
    def start(dynamo_gm: GraphModule, aten_gm: GraphModule, backend_kwargs: dict) -> "Watch":
        if not _WATCHERS:
            return Watch()
        return _ActiveWatch(_WATCHERS[-1], dynamo_gm, aten_gm, backend_kwargs)

    def canonical(self, aten_gm: GraphModule) -> None:
        pass

    def rewritten(self, aten_gm: GraphModule, graph_report) -> None:
        pass

    def wrap(self, compiled: Callable) -> Callable:
        return compiled


class _ActiveWatch(Watch):
    active = True

    def __init__(self, watcher: Watcher, dynamo_gm, aten_gm, backend_kwargs):
        self.watcher, self.dynamo_gm, self.backend_kwargs = watcher, dynamo_gm, dict(backend_kwargs)
        self.raw = _copy(aten_gm)  # pre-dispatch ATen as traced
        self.before: Optional[GraphModule] = None  # canonical, not yet rewritten
        self.after: Optional[GraphModule] = None
        self.report, self.root = None, report_mod.ROOT
        watcher.watches.append(self)

    def canonical(self, aten_gm: GraphModule) -> None:
        self.before = _copy(aten_gm)

    def rewritten(self, aten_gm: GraphModule, graph_report) -> None:
        self.after, self.report = _copy(aten_gm), graph_report
        self.root = report_mod.root_name()  # asked while Dynamo traces, as the report does

    def wrap(self, compiled: Callable) -> Callable:
        from .backend import _positional_call

        state = {"first": True}

        def run(*args):  # the graph's inputs, positional, as Dynamo calls a backend's callable
            if state["first"]:
                state["first"] = False
                self._check(list(args), compiled)
            return compiled(*args)

        return _positional_call(run)

    # ---------------------------------------------------------------------------------------------- the checks
    def _check(self, inputs: list, compiled: Callable) -> None:
        try:
            with torch.no_grad():
                base = _values(self.before, _fresh(self.before, inputs))
            self.watcher.verification.checks += self._site_checks(base)
            if self.watcher.grad:
                self.watcher.verification.checks += self._grad_checks(base)
            whole = self._graph_checks(inputs, compiled)
            self.watcher.verification.checks += whole
            if self.watcher.bisect and any(not c.ok for c in whole):
                self.watcher.bisects.append(self._bisect(inputs))
        except Exception as e:  # a check that cannot run is reported, never raised into the user's program
            log.exception("mojo verify: checking graph %s failed", self.report.compile_id)
            self.watcher.verification.notes.append(f"graph {self.report.compile_id}: could not check: {e!r}")
            self.watcher.verification.checks.append(Check(self.report.compile_id, "(graph)", "-", "-", "-", "-",
                                                          "check", "-", 0, 0, 0, 0, False, f"error: {e!r}"))

    def _sites(self):
        """(site report rows, region) per rewritten region of the graph. A pattern whose replacement has no Mojo op
        (a user's) has no report row: the region's nodes still name the pattern."""
        by_name = {site.node: site for site in self.report.sites}
        for region in _regions(self.before, self.after):
            sites = [by_name[n.name] for n in region.nodes if n.name in by_name]
            if not sites:
                named = [n for n in region.nodes if n.meta.get("mojo_pattern")]
                if not named:
                    continue  # not a pattern's: nothing to attribute
                sites = [report_mod.FusedSite(named[0].meta["mojo_pattern"], str(named[-1].target), "-",
                                              report_mod.module_path(named[0], root=False) or self.root,
                                              node=named[0].name)]
            yield sites, region

    def _site_checks(self, base: dict) -> list[Check]:
        checks = []
        names = _by_name(self.before)
        for sites, region in self._sites():
            fused = region.evaluate(self.after, lambda n: base[names[n.name]])
            eager = [base[o] for o in region.replaced]
            exact = _exact_subgraph(self.before, region, base)
            for i, (f, e, x) in enumerate(zip(fused, eager, exact)):
                checks.append(self._compare(sites, f"out {i}", f, e, x))
        return checks

    def _grad_checks(self, base: dict) -> list[Check]:
        checks = []
        names = _by_name(self.before)
        from .patterns import needs_grad

        for sites, region in self._sites():
            # the inputs autograd differentiates in the model (a parameter, an activation), not cos / sin tables
            leaves = [n for n in region.inputs if _is_float(base[names[n.name]]) and needs_grad(names[n.name])]
            if not leaves or not any(_is_float(base[o]) for o in region.replaced):
                continue
            values = [base[names[n.name]].detach() for n in leaves]
            outputs = [base[o] for o in region.replaced]
            # (not seed 0, a user's favourite: the output gradient would equal an input drawn from it, and a norm's
            # input gradient -- the output gradient projected off the input -- would be rounding noise alone)
            gen = torch.Generator(device="cpu").manual_seed(GRAD_SEED)
            grads_out = [torch.randn(o.shape, generator=gen, dtype=torch.float32).to(o.device, o.dtype)
                         if _is_float(o) else None for o in outputs]

            def grads(evaluate, upcast=False):
                ins = [(v.double() if upcast else v).clone().requires_grad_(True) for v in values]
                with torch.enable_grad():
                    outs = evaluate(ins)
                    pairs = [(o, (g.double() if upcast else g)) for o, g in zip(outs, grads_out)
                             if g is not None and isinstance(o, torch.Tensor) and o.requires_grad]
                    if not pairs:
                        return [None] * len(ins)
                    return torch.autograd.grad([o for o, _ in pairs], ins, [g for _, g in pairs],
                                               allow_unused=True)

            fused = grads(lambda ins: region.evaluate(self.after, lambda n: base[names[n.name]],
                                                      dict(zip(leaves, ins))))
            eager = grads(lambda ins: _subgraph(self.before, region, base, dict(zip(leaves, ins)), False))
            exact = grads(lambda ins: _subgraph(self.before, region, base, dict(zip(leaves, ins)), True), True)
            for leaf, f, e, x in zip(leaves, fused, eager, exact):
                if e is None and f is None:
                    continue
                zero = torch.zeros_like(base[names[leaf.name]])
                checks.append(self._compare(sites, f"grad {leaf.name}", zero if f is None else f,
                                            zero if e is None else e, zero.double() if x is None else x))
        return checks

    def _graph_checks(self, inputs: list, compiled: Callable) -> list[Check]:
        gid = self.report.compile_id
        if _random_ops(self.before):
            self.watcher.verification.notes.append(f"graph {gid}: has random ops (dropout in training?): "
                                                   "its sites are compared, the graph as a whole is not")
            return []
        with torch.no_grad():
            eager = _flat_outputs(self.dynamo_gm(*_fresh(self.before, inputs)))
            exact = _flat_outputs(_values(self.before, _fresh(self.before, inputs), upcast=True, outputs=True))
            fresh = _fresh(self.before, inputs)
            got = _flat_outputs(compiled(*fresh))
        checks = []
        row = report_mod.FusedSite("-", "-", self.report.target, "(graph)")
        for i, (g, e, x) in enumerate(zip(got, eager, exact)):
            if isinstance(e, torch.Tensor):
                checks.append(self._compare([row], f"out {i}", g, e, x, graph_row=True))
        return checks

    def _compare(self, sites, what, fused, eager, exact, graph_row=False) -> Check:
        gid = self.report.compile_id
        site = sites[0] if sites else report_mod.FusedSite("?", "?", "?", "")
        name = "(graph)" if graph_row else (site.source or self.root)
        pattern = "+".join(s.pattern for s in sites) or "-"
        ops = "+".join(s.op for s in sites) or "-"
        kernel = "+".join(s.kernel for s in sites if s.kernel)
        if not isinstance(fused, torch.Tensor) or not fused.is_floating_point():
            same = isinstance(fused, torch.Tensor) and isinstance(eager, torch.Tensor) and \
                fused.shape == eager.shape and torch.equal(fused.cpu(), eager.cpu())
            same = same or (not isinstance(fused, torch.Tensor) and fused == eager)
            return Check(gid, name, pattern, ops, site.target, kernel, what, _dtype(fused), 0.0, 0.0, 0.0, 0.0,
                         bool(same), "" if same else "not equal")
        note = ""
        if fused.shape != eager.shape or fused.dtype != eager.dtype:
            return Check(gid, name, pattern, ops, site.target, kernel, what, _dtype(fused), float("inf"),
                         float("inf"), float("inf"), 0.0, False,
                         f"shape/dtype {tuple(fused.shape)} {fused.dtype} vs eager {tuple(eager.shape)} "
                         f"{eager.dtype}")
        # NaN and +-inf where eager has them, and only there; the finite values are then compared (the others
        # zeroed: the same on both sides)
        special_ok = all(torch.equal(kind(fused).cpu(), kind(eager).cpu())
                         for kind in (torch.isnan, torch.isposinf, torch.isneginf))
        f, e, x = (t.detach().double().cpu().nan_to_num(0.0, 0.0, 0.0) for t in (fused, eager, exact))
        max_abs = (f - e).abs().max().item() if f.numel() else 0.0
        rel, err, eager_err = _rel(f, e), _rel(f, x), _rel(e, x)
        bound = 2 * eager_err + FLOOR.get(fused.dtype, 1e-6)
        elem, element = _worst_element(fused, eager, exact, f, e, x, bound)
        ok = special_ok and err <= bound and elem <= 1.0
        if not special_ok:
            note = "NaN or inf where eager has none, or none where it has"
        return Check(gid, name, pattern, ops, site.target, kernel, what, _dtype(fused), max_abs, rel, err, bound,
                     ok, note, elem, element)

    # ---------------------------------------------------------------------------------------------- bisect
    def _bisect(self, inputs: list) -> BisectResult:
        from . import patterns
        from .options import Options

        options = Options.parse(**self.backend_kwargs)
        # the rewrites in the order rewrite() applies them: the patterns, then the graph passes over their result
        rewrites = [*patterns.registered_patterns(), *patterns.registered_graph_passes()]
        ordered = [r.name for r in rewrites if r.enabled(options.disable)]
        gid = self.report.compile_id

        def differs(k: int) -> bool:
            # "=name": that exact name, not a glob over names nor the family a name may equal
            exact = ["=" + name for name in ordered[k:]]
            return not all(c.ok for c in self._trial(inputs, list(options.disable) + exact))

        if differs(0):
            return BisectResult(gid, True, "", [], "It differs with every pattern and graph pass disabled: not a "
                                "Mojo rewrite (the inner compiler, or a nondeterministic graph).")
        lo, hi = 0, len(ordered)  # differs(lo) is False, differs(hi) is True
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if differs(mid):
                hi = mid
            else:
                lo = mid
        culprit = ordered[hi - 1]
        mine = [c for c in self.watcher.verification.checks
                if c.graph == gid and c.site != "(graph)" and culprit in c.pattern.split("+")]
        failing = [c for c in mine if not c.ok]
        every = list({c.site: c for c in mine}.values())
        message = f"Enabling patterns and graph passes in order, the graph first differs with {culprit!r}." + (
            "" if failing or not every else " No site of it differs alone: listed are all of them.")
        return BisectResult(gid, True, culprit, failing or every, message)

    def _trial(self, inputs: list, disable: list[str]) -> list[Check]:
        """Compile the Dynamo graph again with `disable`, run it on the inputs and compare with eager."""
        from . import backend

        kwargs = copy.deepcopy(self.backend_kwargs)
        kwargs["options"] = {**(kwargs.get("options") or {}), "disable": disable}
        saved = list(report_mod.last_report().graphs)
        watchers = list(_WATCHERS)
        _WATCHERS.clear()  # the trial compile is not watched itself
        try:
            gm = copy.deepcopy(self.dynamo_gm)
            compiled = backend.mojo_backend(gm, _fresh(self.before, inputs), **kwargs)
            return self._graph_checks(inputs, compiled)
        finally:
            _WATCHERS.extend(watchers)
            report_mod.reset_report()
            for g in saved:
                report_mod.add_graph(g)

    def diff(self) -> str:
        before = self.raw.code.strip().splitlines()
        after = (self.after.code if self.after is not None else "").strip().splitlines()
        return "\n".join(difflib.unified_diff(before, after, f"graph {self.report.compile_id} before",
                                              f"graph {self.report.compile_id} after", lineterm=""))


# ------------------------------------------------------------------------------------------------------ regions
@dataclass
class Region:
    """The nodes a rewrite added, connected: in the rewritten graph `nodes`, read from `inputs` (nodes of both
    graphs); `uses` the places outside that read them ((user name, position in its flattened arguments)), and
    `replaced` the unrewritten graph's nodes that stood there."""
    nodes: list[Node]
    inputs: list[Node]
    uses: list[tuple[Node, int]]
    replaced: list[Node]

    def evaluate(self, gm: GraphModule, known: Callable[[Node], Any], overrides: Optional[dict] = None) -> list:
        env: dict = {}
        overrides = overrides or {}

        def lookup(n):
            if n in env:
                return env[n]
            return overrides[n] if n in overrides else known(n)

        for node in self.nodes:
            env[node] = _call(gm, node, lookup, upcast=False)
        return [_argument(user, pos, lookup) for user, pos in self.uses]


def _regions(before: GraphModule, after: GraphModule) -> list[Region]:
    old = _by_name(before)

    def is_new(n: Node) -> bool:
        o = old.get(n.name)
        return n.op not in ("placeholder", "output") and (o is None or o.target != n.target)

    new = [n for n in after.graph.nodes if is_new(n)]
    new_set, seen, regions = set(new), set(), []
    order = _order(after)
    for start in new:
        if start in seen:
            continue
        component = _component(start, new_set)
        seen |= component
        nodes = sorted(component, key=order)
        inputs = sorted({a for n in nodes for a in n.all_input_nodes if a not in component}, key=order)
        uses, replaced = [], []
        for user in sorted({u for n in nodes for u in n.users if u not in component}, key=order):
            before_user = old[user.name]
            after_args, before_args = _flat_args(user), _flat_args(before_user)
            for pos, arg in enumerate(after_args):
                if arg in component and pos < len(before_args) and isinstance(before_args[pos], Node):
                    uses.append((user, pos))
                    replaced.append(before_args[pos])
        regions.append(Region(nodes, inputs, uses, replaced))
    return regions


def _component(start: Node, members: set) -> set:
    out, stack = set(), [start]
    while stack:
        n = stack.pop()
        if n in out:
            continue
        out.add(n)
        stack += [m for m in (*n.all_input_nodes, *n.users) if m in members]
    return out


def _exact_subgraph(before: GraphModule, region: Region, base: dict) -> list:
    names = _by_name(before)
    overrides = {names[n.name]: _up(base[names[n.name]]) for n in region.inputs}
    with torch.no_grad():
        return _subgraph(before, region, base, overrides, True, keyed_by_before=True)


def _subgraph(before: GraphModule, region: Region, base: dict, overrides: dict, upcast: bool,
              keyed_by_before: bool = False) -> list:
    """The nodes `region` replaced, computed in the unrewritten graph from `overrides` (its inputs), every other
    value taken from `base` (made fp64 with upcast)."""
    names = _by_name(before)
    if not keyed_by_before:
        overrides = {names[n.name]: v for n, v in overrides.items()}
    wanted = list(region.replaced)
    needed, stack = set(), list(wanted)
    while stack:
        n = stack.pop()
        if n not in needed:
            needed.add(n)
            stack += n.all_input_nodes
    env, dirty = dict(overrides), set(overrides)

    def lookup(n):
        if n in env:
            return env[n]
        return _up(base[n]) if upcast else base[n]

    for node in before.graph.nodes:
        if node in needed and node not in overrides and node.op == "call_function" \
                and any(a in dirty for a in node.all_input_nodes):
            dirty.add(node)
            env[node] = _call(before, node, lookup, upcast)
    return [lookup(n) for n in wanted]


# ------------------------------------------------------------------------------------------------------ running
def _call(gm: GraphModule, node: Node, lookup: Callable, upcast: bool):
    if node.op == "get_attr":
        value = operator.attrgetter(str(node.target))(gm)  # a submodule's attribute: "layers.0.bias"
        return _up(value) if upcast else value
    if node.op != "call_function":
        return lookup(node)
    args = torch.fx.node.map_arg(node.args, lookup)
    kwargs = torch.fx.node.map_arg(node.kwargs, lookup)
    if upcast:
        args, kwargs = pytree.tree_map(_up_dtype, (args, kwargs))
    return node.target(*args, **kwargs)


class _Upcast(torch.fx.Interpreter):
    def placeholder(self, target, args, kwargs):
        return _up(super().placeholder(target, args, kwargs))

    def get_attr(self, target, args, kwargs):
        return _up(super().get_attr(target, args, kwargs))

    def call_function(self, target, args, kwargs):
        args, kwargs = pytree.tree_map(_up_dtype, (args, kwargs))
        return super().call_function(target, args, kwargs)


def _values(gm: GraphModule, inputs: list, upcast: bool = False, outputs: bool = False):
    """Every node's value (or, with outputs, the graph's outputs), run on `inputs`."""
    interpreter = (_Upcast if upcast else torch.fx.Interpreter)(gm, garbage_collect_values=outputs)
    out = interpreter.run(*inputs)
    return out if outputs else dict(interpreter.env)


def _fresh(gm: GraphModule, inputs: list) -> list:
    """The inputs, with a copy of each the graph writes in place (a KV cache): every run starts from the same."""
    from .canonicalize import _touched_by_mutation

    gm.graph.__dict__.pop("_mojo_touched", None)
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    out = []
    for node, value in zip(placeholders, inputs):
        out.append(value.detach().clone() if isinstance(value, torch.Tensor) and _touched_by_mutation(node)
                   else value)
    gm.graph.__dict__.pop("_mojo_touched", None)
    return out + list(inputs[len(placeholders):])


def _random_ops(gm: GraphModule) -> bool:
    for n in gm.graph.nodes:
        name = getattr(n.target, "__name__", "").split(".")[0]
        if n.op == "call_function" and name in _RANDOM_OPS:
            return True
        if n.op == "call_function" and name == "dropout" and len(n.args) > 2 and n.args[2] and n.args[1]:
            return True
    return False


def _copy(gm: GraphModule) -> GraphModule:
    """The graph as it is now (node names kept), reading the same attributes: later passes do not change it."""
    return GraphModule(gm, copy.deepcopy(gm.graph))


# ------------------------------------------------------------------------------------------------------ helpers
def _by_name(gm: GraphModule) -> dict:
    cache = gm.graph.__dict__.get("_mojo_by_name")
    if cache is None or len(cache) != len(gm.graph.nodes):
        cache = {n.name: n for n in gm.graph.nodes}
        gm.graph.__dict__["_mojo_by_name"] = cache
    return cache


def _order(gm: GraphModule):
    index = {n: i for i, n in enumerate(gm.graph.nodes)}
    return index.__getitem__


def _is_mojo(node: Node) -> bool:
    return node.op == "call_function" and getattr(node.target, "namespace", None) == "mojo"


def _is_float(value) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def _up(value):
    return value.detach().double() if _is_float(value) else value


def _up_dtype(value):
    return torch.float64 if isinstance(value, torch.dtype) and value.is_floating_point else value


def _flat_args(node: Node) -> list:
    return pytree.tree_leaves((node.args, node.kwargs))


def _argument(user: Node, pos: int, lookup: Callable):
    return lookup(_flat_args(user)[pos])


def _flat_outputs(out) -> list:
    return pytree.tree_leaves(out)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.numel() == 0:
        return 0.0
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def _ulp(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The spacing of `dtype`'s numbers at each |value| (fp64 values): one rounding there. Below the smallest
    normal number the spacing is the subnormals' (tiny x eps), zero included."""
    info = torch.finfo(dtype)
    _, exponent = torch.frexp(values.abs().clamp_min(info.tiny))  # |v| = m x 2^exponent, m in [0.5, 1)
    return torch.ldexp(torch.full_like(values, info.eps), exponent - 1)


def _worst_element(fused, eager, exact, f, e, x, bound: float) -> tuple[float, str]:
    """The elementwise rule (module doc): the largest |fused - fp64| / allowance over the elements, and that
    element (index, fused, eager, fp64). f, e, x: fused, eager and fp64 as fp64 on the CPU, NaN and inf zeroed."""
    if f.numel() == 0:
        return 0.0, ""
    # the normwise allowance spread evenly: were every element this far off, the normwise error would be the bound.
    # It covers an element that eager got exact by chance, where a correct kernel's error is still one rounding of
    # the terms it summed, not of the (cancelled, small) result.
    # Scaled by sqrt(2 ln n), the expected largest of n normal samples in units of their spread: where both kernels'
    # errors are noise of one size, eager's at some element is near zero by chance, and the fused kernel's largest
    # is that many spreads (4.9 for 131k elements), not one.
    even_share = bound * x.norm().item() / f.numel() ** 0.5 * max(1.0, math.sqrt(2 * math.log(f.numel())))
    allowance = ELEMENT_FACTOR * ((e - x).abs() + _ulp(x, fused.dtype)) + even_share
    ratio = ((f - x).abs() / allowance).flatten()
    worst = int(ratio.argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), f.shape))

    def at(t):
        return t.detach().reshape(-1)[worst].item()

    return ratio[worst].item(), (f"element {index}: fused {at(fused):.6g}, eager {at(eager):.6g}, "
                                 f"fp64 {at(exact):.6g}")


def _dtype(value) -> str:
    return str(value.dtype).replace("torch.", "") if isinstance(value, torch.Tensor) else type(value).__name__


# ------------------------------------------------------------------------------------------------------ the API
def _compile_and_run(model_or_fn, args, kwargs, options):
    torch._dynamo.reset()  # compile anew: a graph Dynamo has cached is not compiled, so not watched
    compiled = torch.compile(model_or_fn, backend="mojo", options=options)
    return compiled(*args, **kwargs)


def verify(model_or_fn, *args, grad: bool = False, options: Optional[dict] = None, **kwargs) -> Verification:
    """Compile `model_or_fn` with backend='mojo' (options as torch.compile's), call it on args / kwargs, and check
    every graph on that call: each fused site and the whole graph against eager (module doc). Returns the table
    as data (`.checks`, `.ok`, `.table()`)."""
    with watching(grad=grad) as watcher:
        _compile_and_run(model_or_fn, args, kwargs, options)
    return watcher.verification


def bisect(model_or_fn, *args, options: Optional[dict] = None, **kwargs) -> list[BisectResult]:
    """For each graph that differs from eager on this call: the first pattern (in applying order) whose enabling
    makes it differ, and that pattern's sites that differ alone."""
    with watching(bisect=True) as watcher:
        _compile_and_run(model_or_fn, args, kwargs, options)
    return watcher.bisects


def diff(model_or_fn, *args, options: Optional[dict] = None, **kwargs) -> list[str]:
    """Each graph before and after rewriting, as a unified diff of pre-dispatch ATen code."""
    with watching() as watcher:
        _compile_and_run(model_or_fn, args, kwargs, options)
    return [w.diff() for w in watcher.watches if w.report is not None]


def explain(model_or_fn, *args, options: Optional[dict] = None, **kwargs) -> "report_mod.Report":
    """Compile and call `model_or_fn`; the report of what this call compiled."""
    report_mod.reset_report()
    _compile_and_run(model_or_fn, args, kwargs, options)
    return report_mod.last_report()


__all__ = ["verify", "bisect", "diff", "explain", "watching", "Verification", "Check", "BisectResult", "Watch",
           "FLOOR"]
