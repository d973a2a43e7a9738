"""Near misses: each site the rewrite left unfused, the pattern that came closest, and what refused it.

Runs on the rewritten graph (backend.py, after patterns.rewrite) and never changes it.

1. Tell-tales. What is left of a family's code after rewriting shows a site none of its patterns took: the ATen ops
   the family's patterns name in `tell_tales` (aten.rsqrt / aten.rms_norm for the norms, SDPA for attention), and
   shapes no single op gives away, found by STRUCTURAL: an activation feeding a product with a same-shape tensor
   (gated MLP), a negation concatenated or stacked (RoPE's rotate-half), a softmax fed by a matmul (eager
   attention). Only families with an enabled pattern count.
2. Sites. Tell-tale hits that share a node, or share a family, sit in the same module and lie within SITE_HOPS ops
   of each other, are one site: a norm is one site although rms_norm and add_rms_norm share its tell-tales, and
   RoPE's q and k rotations are one.
3. Candidates. Inductor anchors a pattern on its output node. From the site's nodes and their users up to
   DOWNSTREAM_HOPS ops on, each node some enabled pattern of the site's families anchors on (at most MAX_ANCHORS)
   is tried with those patterns' PatternMatcherPass entries, as PatternMatcherPass.apply does, but in a
   MatchContext of our own, so that we can count how far the match got: pattern nodes reached before the first
   difference.
4. Verdicts. A generic match (Inductor's first match ignores ints, floats, lists, dtypes) is re-checked with the
   entry's own check (at most MAX_CHECKS, largest patterns first: each re-traces the pattern), which re-traces the
   pattern with the site's shapes and dtypes, matches again, then runs the shared checks and the pattern's
   extra_check (patterns._check_and_note_source, which leaves its verdict and reason in patterns._REFUSAL; a check
   says why with `refuse(reason)`). The re-traced pattern and any trace error are caught on their way through
   Inductor's `fx_to_pattern` / `log_trace_failure` while the re-check runs. Each attempt reaches a stage:
       0  the generic pattern differs      reason: the node that differed (its op, argument count or a constant)
       1  the re-traced pattern differs    reason: the constant that differed (a dim, a cast's dtype, a slice
                                           bound, ...), or why the pattern does not trace with these shapes
       2  a check refused                  reason: the check's
       3  everything passes                (not applied: another fusion took part of it, or an in-place write)
   The closest attempt is the one at the highest stage, then with the most pattern nodes matched, then the
   smallest pattern (the fewest nodes left unexplained).
5. Cheap: re-checks stop at the first check refusal (a smaller pattern is not closer), and a re-traced pattern is
   kept per (entry, input shapes / strides / dtypes), so the same unfused site in every layer is traced once. The
   patching of Inductor's module functions lasts only while explain() runs (compiles are serialised by Dynamo).
Anything that goes wrong explaining a site becomes its reason ("could not explain: ..."); explain() never raises.
"""
from __future__ import annotations

import contextlib
import logging
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import torch
from torch.fx import GraphModule, Node

from . import patterns, report
from .report import NearMiss

log = logging.getLogger("mojo_compile")
aten = torch.ops.aten

SITE_HOPS = 4  # tell-tale hits of a family in one module this close (in ops, either direction) are one site
DOWNSTREAM_HOPS = 4  # how far past a tell-tale a pattern's output (its anchor) is looked for
MAX_ANCHORS = 16  # anchor nodes tried per site
MAX_ATTEMPTS = 800  # generic matches tried per site (cheap: no trace)
MAX_CHECKS = 6  # re-checks per site (each traces the pattern)
_REGION_LIMIT = 64  # nodes visited looking for a neighbouring hit


# ------------------------------------------------------------------------------------------ structural tell-tales
def _overloads(*names: str) -> set:
    ops = set()
    for name in names:
        packet = getattr(aten, name, None)
        if packet is not None and hasattr(packet, "default"):
            ops.add(packet.default)
    return ops


_ACTIVATIONS = _overloads("silu", "gelu", "relu", "sigmoid", "tanh", "mish", "hardswish", "hardsigmoid", "elu",
                          "leaky_relu", "softplus", "selu", "celu", "hardtanh", "relu6")
_SOFTMAX = {aten.softmax.int, aten._softmax.default, *_overloads("_safe_softmax")}
_MATMUL = {aten.matmul.default, aten.bmm.default, aten.baddbmm.default, aten.einsum.default}


def _shape_key(node: Node) -> Optional[tuple]:
    val = node.meta.get("val")
    return tuple(str(s) for s in val.shape) if isinstance(val, torch.Tensor) else None  # str: no guards


def _gated(node: Node) -> Optional[list[Node]]:
    """act(gate) * up, up a tensor of act(gate)'s shape (not gate itself: x * sigmoid(x) is silu, not gated)."""
    if node.target not in _ACTIVATIONS:
        return None
    for user in node.users:
        if user.op != "call_function" or user.target is not aten.mul.Tensor or len(user.args) != 2:
            continue
        other = user.args[1] if user.args[0] is node else user.args[0]
        if isinstance(other, Node) and other is not node and other not in node.all_input_nodes \
                and _shape_key(other) is not None and _shape_key(other) == _shape_key(node):
            return [node, user]
    return None


def _rotate(node: Node) -> Optional[list[Node]]:
    """cat((-x2, x1)) (rotate_half) or stack((-x[1::2], x[::2])) (rotate_every_two); or the rotation written out,
    cat((x1 * c - x2 * s, x2 * c + x1 * s)) (gpt-oss, DeepSeek-V3's interleaved halves)."""
    if node.target not in (aten.cat.default, aten.stack.default) or not node.args \
            or not isinstance(node.args[0], (list, tuple)):
        return None
    parts = [p for p in node.args[0] if isinstance(p, Node)]
    negs = [p for p in parts if p.target is aten.neg.default]
    if negs:
        return [*negs, node]

    def of_products(p: Node, op) -> bool:
        return p.target is op and len(p.args) >= 2 and all(
            isinstance(a, Node) and a.target is aten.mul.Tensor for a in p.args[:2])

    written = [p for p in parts if of_products(p, aten.sub.Tensor)], [p for p in parts
                                                                       if of_products(p, aten.add.Tensor)]
    return [*written[0], *written[1], node] if written[0] and written[1] else None


def _eager_attention(node: Node) -> Optional[list[Node]]:
    """softmax(... matmul(q, k^T) ...): a matmul a few ops above a softmax."""
    if node.target not in _SOFTMAX or not node.args:
        return None
    stack, seen = [(node.args[0], 0)], set()
    while stack and len(seen) < 16:
        n, depth = stack.pop()
        if not isinstance(n, Node) or n in seen or n.op != "call_function" or depth > 5:
            continue
        seen.add(n)
        if n.target in _MATMUL:
            return [n, node]
        stack.extend((a, depth + 1) for a in n.all_input_nodes)
    return None


# family -> node -> the nodes of a site of that family that `node` shows, or None
STRUCTURAL: dict[str, Callable[[Node], Optional[list[Node]]]] = {
    "gated_act": _gated,
    "rope": _rotate,
    "attention": _eager_attention,
}


# ------------------------------------------------------------------------------------------------------ sites
@dataclass
class _Hit:
    nodes: list[Node]
    families: set


@dataclass
class _Site:
    nodes: list[Node]  # the tell-tale nodes, in graph order
    families: set


def _path(node: Node) -> str:
    try:
        return report.module_path(node, root=False)
    except TypeError:  # a module_path without root=
        return report.module_path(node)


def _hits(gm: GraphModule, enabled: Sequence[patterns.Pattern]) -> list[_Hit]:
    op_families: dict = defaultdict(set)
    for pattern in enabled:
        for op in pattern.tell_tales:
            op_families[op].add(pattern.family)
    detectors = [(family, detect) for family, detect in STRUCTURAL.items()
                 if any(p.family == family for p in enabled)]
    hits = []
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        families = op_families.get(node.target) or op_families.get(getattr(node.target, "overloadpacket", None))
        if families:  # (a tell-tale may be given as the overload packet: aten.rsqrt for aten.rsqrt.default)
            hits.append(_Hit([node], set(families)))
        for family, detect in detectors:
            nodes = detect(node)
            if nodes:
                hits.append(_Hit(nodes, {family}))
    return hits


def _region(start: Sequence[Node], hops: int) -> set[Node]:
    """The call_function nodes within `hops` ops of `start`, either direction (bounded)."""
    seen, frontier = set(start), list(start)
    for _ in range(hops):
        nxt = []
        for n in frontier:
            for m in (*n.all_input_nodes, *n.users):
                if m not in seen and m.op == "call_function":
                    seen.add(m)
                    nxt.append(m)
                    if len(seen) >= _REGION_LIMIT:
                        return seen
        frontier = nxt
    return seen


def _sites(gm: GraphModule, hits: list[_Hit]) -> list[_Site]:
    parent = list(range(len(hits)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(i, j):
        parent[find(i)] = find(j)

    by_node: dict = defaultdict(list)
    for i, hit in enumerate(hits):
        for n in hit.nodes:
            by_node[n].append(i)
    for ids in by_node.values():
        for j in ids[1:]:
            union(ids[0], j)
    paths = [_path(hit.nodes[0]) for hit in hits]
    for i, hit in enumerate(hits):
        for n in _region(hit.nodes, SITE_HOPS):
            for j in by_node.get(n, ()):
                if j != i and hits[j].families & hit.families and paths[j] == paths[i]:
                    union(i, j)
    groups: dict = defaultdict(list)
    for i in range(len(hits)):
        groups[find(i)].append(hits[i])
    order = {n: k for k, n in enumerate(gm.graph.nodes)}
    sites = []
    for group in groups.values():
        nodes = sorted({n for hit in group for n in hit.nodes}, key=order.__getitem__)
        sites.append(_Site(nodes, set().union(*(hit.families for hit in group))))
    return sorted(sites, key=lambda s: order[s.nodes[0]])


# ------------------------------------------------------------------------------------------------ matching
@dataclass
class _Attempt:
    pattern: patterns.Pattern
    size: int
    stage: int  # 0 generic differs, 1 re-traced differs, 2 a check refused, 3 all passed
    score: int  # pattern nodes matched (stage 2 / 3: the pattern's size)
    reason: Any  # a str, or a FailedMatch described on demand

    def key(self) -> tuple:
        return (self.stage, self.score, -self.size)


def _match_depth(expr, node: Node):
    """expr.match(node), and how many of the pattern's nodes it matched before the first difference (the nodes on
    the path to it count as reached, the differing one does not)."""
    from torch._inductor import pattern_matcher as pm

    outputs = expr.outputs if isinstance(expr, pm.MultiOutputPattern) else [expr]
    ctx = pm.MatchContext(outputs, graph=node.graph)
    try:
        result = ctx.match(expr, node)
    except pm.FailedMatch as e:
        result = e
    reached = sum(1 for p in ctx.pattern_to_node if isinstance(p, pm._TargetExpr))
    return result, reached - (0 if result else 1)


def _op(node: Any) -> str:
    if not isinstance(node, Node):
        return repr(node)
    if node.op != "call_function":
        return f"{node.op} {node.name}"
    target = node.target if isinstance(node.target, torch._ops.OpOverload) else \
        getattr(node.target, "__name__", node.target)
    return f"{target} ({node.name})"


def _argument_name(node: Any, value: Any) -> str:
    """The schema name of the argument of `node` that holds `value` (the matcher reports only the value): "dim",
    "dtype", ... ("" where unknown or ambiguous)."""
    schema = getattr(getattr(node, "target", None), "_schema", None)
    if schema is None or type(value) not in (int, float, bool, str, torch.dtype, torch.device, torch.layout):
        return ""  # (never a SymInt: comparing one would add a guard)
    names = []
    given = [*zip((a.name for a in schema.arguments), node.args), *node.kwargs.items()]
    for name, arg in given:
        items = arg if isinstance(arg, (list, tuple)) else [arg]
        if any(type(item) is type(value) and item == value for item in items if not isinstance(item, Node)):
            names.append(name)
    return names[0] if len(names) == 1 else ""


_SIMPLE = {
    "repeated pattern differs": "a value the pattern uses twice is two different values here",
    "exclusive arg appears twice": "one value is passed for two of the pattern's inputs",
    "no anchor found": "the pattern's other output is not computed here",
    "non_list": "a list argument of the pattern is not a list here",
}


def describe_failure(failure) -> str:
    """A FailedMatch in words: which node differed from the pattern, and how."""
    from torch._inductor import pattern_matcher as pm

    fmt, args = getattr(failure, "format_string", ""), getattr(failure, "args", ())
    try:
        if fmt.startswith("function_mismatch") and len(args) == 2:
            node, expr = args
            want = expr.fns_repr() if isinstance(expr, pm._TargetExpr) else repr(expr)
            if isinstance(node, Node) and isinstance(expr, pm._TargetArgsExpr) and node.op == expr.op \
                    and node.target in expr.fns_set:
                return f"{_op(node)} has {len(node.args)} positional arguments where the pattern has " \
                       f"{len(expr.args)}"
            return f"{_op(node)} where the pattern has {want}"
        if fmt.startswith("constant_args") and len(args) == 2:
            node, value = args
            name = _argument_name(node, value)
            return f"{_op(node)} has {name + ' ' if name else ''}{value!r} where the pattern has " \
                   f"{failure.kwargs.get('pattern')!r}"
        if fmt.startswith("multiple_users") and args:
            expr = args[0]
            name = expr.fns_repr() if isinstance(expr, pm._TargetExpr) else repr(expr)
            return f"the result of {name} is also used outside the pattern"
        if fmt.startswith("args_structure"):
            return f"an op's arguments are laid out differently from the pattern's ({failure})"
        if fmt.startswith("kwarg mismatch") and args:
            return f"the pattern's input {args[0]!r} would be two different values here"
        if fmt.startswith("list[") and len(args) == 2:
            return f"list item {args[0]}: {describe_failure(args[1])}"
        if fmt in _SIMPLE:
            return _SIMPLE[fmt]
    except Exception:  # describe what we can: the matcher's own words
        pass
    return str(failure)


@contextlib.contextmanager
def _observed_rechecks():
    """While Inductor's check_fn re-traces a pattern: catch the re-traced pattern (fx_to_pattern) and a trace error
    (log_trace_failure), and keep the fake-tensor errors of a failing trace out of the log (the rewrite logged
    them already)."""
    from torch._inductor import pattern_matcher as pm

    seen: dict = {}
    to_pattern, trace_failure = pm.fx_to_pattern, pm.log_trace_failure

    def fx_to_pattern(*args, **kwargs):
        seen["specific"] = to_pattern(*args, **kwargs)
        return seen["specific"]

    def log_trace_failure(search_fn, e):
        seen["trace_error"] = e

    quiet = logging.getLogger("torch._subclasses.fake_tensor")
    level = quiet.level
    pm.fx_to_pattern, pm.log_trace_failure = fx_to_pattern, log_trace_failure
    quiet.setLevel(logging.CRITICAL)
    try:
        yield seen
    finally:
        pm.fx_to_pattern, pm.log_trace_failure = to_pattern, trace_failure
        quiet.setLevel(level)


def _signature(match) -> tuple:
    """What Inductor's re-trace of a pattern depends on: the matched inputs' sizes, strides, dtypes (or values)."""
    items = []
    for name, value in sorted(match.kwargs.items(), key=lambda kv: str(kv[0])):
        val = value.meta.get("val") if isinstance(value, Node) else value
        if isinstance(val, torch.Tensor):
            val = (val.dtype, val.device.type, tuple(map(str, val.shape)), tuple(map(str, val.stride())))
        else:
            val = repr(val)
        items.append((str(name), val))
    return tuple(items)


def _recheck(pattern, size, entry, match, seen: dict, cache: dict) -> _Attempt:
    """Run the entry's own check (re-trace, re-match, shared checks, extra_check) on a generic match. Where a site
    of the same input shapes was re-checked before (the same layer, again), a re-traced pattern that differs is
    known without tracing again."""
    out = match.output_nodes()[0]
    key = (id(entry), _signature(match))
    known = cache.get(key)
    if isinstance(known, str):
        return _Attempt(pattern, size, 1, 0, known)
    if known is not None and out is not None:
        result, depth = _match_depth(known, out)
        if not result:
            return _Attempt(pattern, size, 1, depth, result)
    seen.clear()
    patterns._REFUSAL["verdict"] = None
    try:
        accepted = bool(entry.extra_check(match))
    except Exception as e:
        return _Attempt(pattern, size, 1, 0, f"re-checking with this site's shapes raised {type(e).__name__}: {e}")
    verdict = patterns._REFUSAL["verdict"]
    if seen.get("trace_error") is not None:
        error = str(seen["trace_error"]).strip().splitlines()
        cache[key] = "the pattern does not trace with this site's shapes and dtypes: " \
            + (error[0][:200] if error else type(seen["trace_error"]).__name__)
        return _Attempt(pattern, size, 1, 0, cache[key])
    if seen.get("specific") is not None:
        cache[key] = seen["specific"]
    if accepted:
        return _Attempt(pattern, size, 3, size, "matches and passes its checks here, but was not applied (another "
                                                "fusion took part of it, or an in-place write lies in between)")
    if verdict is not None and verdict[1] is not None:
        return _Attempt(pattern, size, 2, size, verdict[1])
    if seen.get("specific") is not None and out is not None:
        result, depth = _match_depth(seen["specific"], out)
        if not result:
            return _Attempt(pattern, size, 1, depth, result)
    return _Attempt(pattern, size, 1, 0, "the pattern re-traced with this site's shapes and dtypes does not match")


def _index(enabled: Sequence[patterns.Pattern]) -> dict:
    """(op, target) -> [(pattern, size, PatternEntry)] anchored there, in the order the rewrite applies them."""
    passes = patterns.registered_passes(enabled)
    index: dict = defaultdict(list)
    for pattern, size, pattern_pass in passes:
        for key, entries in list(pattern_pass.patterns.items()):
            index[key].extend((pattern, size, entry) for entry in entries)
    return index


def _anchors(site: _Site, keys) -> list[Node]:
    """The site's nodes and their users up to DOWNSTREAM_HOPS on, nearest first, where a candidate is anchored."""
    anchors, seen, frontier = [], set(site.nodes), list(site.nodes)
    for hop in range(DOWNSTREAM_HOPS + 1):
        for n in frontier:
            if n.op == "call_function" and (n.op, n.target) in keys:
                anchors.append(n)
                if len(anchors) >= MAX_ANCHORS:
                    return anchors
        if hop == DOWNSTREAM_HOPS:
            break
        nxt = []
        for n in frontier:
            for user in n.users:
                if user not in seen:
                    seen.add(user)
                    nxt.append(user)
        frontier = nxt
    return anchors


def _closest(site: _Site, index: dict, seen: dict, cache: dict) -> Optional[_Attempt]:
    keys = {key: [c for c in candidates if c[0].family in site.families] for key, candidates in index.items()}
    keys = {key: candidates for key, candidates in keys.items() if candidates}
    attempts, generic, tried = [], [], 0
    for anchor in _anchors(site, keys):
        for pattern, size, entry in keys[(anchor.op, anchor.target)]:
            if tried >= MAX_ATTEMPTS:
                break
            tried += 1
            result, depth = _match_depth(entry.pattern, anchor)
            if result:
                generic.append((pattern, size, entry, result))
            else:
                attempts.append(_Attempt(pattern, size, 0, depth, result))
    generic.sort(key=lambda g: -g[1])  # the largest first, as the rewrite applies them
    for pattern, size, entry, match in generic[:MAX_CHECKS]:
        attempts.append(_recheck(pattern, size, entry, match, seen, cache))
        if attempts[-1].stage >= 2:
            break  # a smaller pattern refused by a check, or matched whole, is not closer
    return max(attempts, key=_Attempt.key, default=None)


# ------------------------------------------------------------------------------------------------------ explain
def _default_family(site: _Site, enabled: Sequence[patterns.Pattern]) -> str:
    """Of the families a site's tell-tales belong to, the plainest (lowest priority: rms_norm before add_rms_norm)."""
    priority = {}
    for p in enabled:
        if p.family in site.families:
            priority[p.family] = min(priority.get(p.family, p.priority), p.priority)
    return min(sorted(site.families), key=lambda f: priority.get(f, 0))


def explain(gm: GraphModule, disabled: Sequence[str] = ()) -> list[NearMiss]:
    """One NearMiss per site the rewrite left unfused in `gm` (already rewritten), in graph order. Never raises."""
    try:
        enabled = [p for p in patterns.registered_patterns() if p.enabled(disabled)]
        sites = _sites(gm, _hits(gm, enabled))
    except Exception as e:  # no sites to explain rather than a failed compile
        log.debug("mojo near misses: could not find the unfused sites: %s", e, exc_info=True)
        return []
    if not sites:
        return []
    near_misses = []
    try:
        index = _index(enabled)
        cache: dict = {}  # (entry, input signature) -> the re-traced pattern, or why it does not trace
        with _observed_rechecks() as seen:
            for site in sites:
                near_misses.append(_explain_site(site, index, enabled, seen, cache))
    except Exception as e:
        log.debug("mojo near misses: %s", e, exc_info=True)
        near_misses += [_unexplained(site, enabled, e) for site in sites[len(near_misses):]]
    finally:
        patterns._SOURCES.clear()  # a re-check that passes notes its source, for an op that never comes
        patterns._REFUSAL.update(reason=None, verdict=None)
        gm.graph.__dict__.pop("_mojo_touched", None)  # _written_later's memo of this graph
    return near_misses


def _ops(site: _Site) -> list[str]:
    return sorted(str(n.target) for n in site.nodes)


def _unexplained(site: _Site, enabled, error: Exception) -> NearMiss:
    family = _default_family(site, enabled)
    return NearMiss(family, _path(site.nodes[0]), _ops(site), "",
                    f"could not explain: {type(error).__name__}: {error}")


def _explain_site(site: _Site, index: dict, enabled, seen: dict, cache: dict) -> NearMiss:
    try:
        best = _closest(site, index, seen, cache)
    except Exception as e:
        log.debug("mojo near misses: site at %s", site.nodes[0].name, exc_info=True)
        return _unexplained(site, enabled, e)
    if best is None:
        family = _default_family(site, enabled)
        return NearMiss(family, _path(site.nodes[0]), _ops(site), "",
                        f"no {family} pattern is anchored on an op within {DOWNSTREAM_HOPS} ops of it")
    reason = best.reason if isinstance(best.reason, str) else describe_failure(best.reason)
    return NearMiss(best.pattern.family, _path(site.nodes[0]), _ops(site), best.pattern.name, reason)


def note(miss: NearMiss) -> str:
    """The report's note for a near miss: `rms_norm: 1 aten.rsqrt.default left unfused at model.norm; closest
    rms_norm.llama: aten.mean.dim (mean_dim) has dim -2 where the pattern has -1`."""
    where = miss.source or getattr(report, "root_name", lambda: "<root>")()
    ops = ", ".join(sorted(set(miss.ops)))
    why = f"closest {miss.pattern}: {miss.reason}" if miss.pattern else miss.reason
    return f"{miss.family}: {len(miss.ops)} {ops} left unfused at {where}; {why}"
