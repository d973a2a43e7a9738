"""What the backend did: per compiled graph, each fused site with its pattern, Mojo op, target and module path.

`mojo_compile.last_report()` returns a snapshot of every graph compiled since the last `reset_report()`
(recompiles and graph breaks each add a graph, with Dynamo's compile id: made unique within the report, since Dynamo
restarts its ids after `torch._dynamo.reset()`).
"""
from __future__ import annotations

import copy
import dataclasses
import json
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Optional

from torch.fx import Node


@dataclass
class FusedSite:
    pattern: str
    op: str
    target: str
    source: str
    fallback: Optional[str] = None  # why the requested target did not take it
    detail: str = ""  # what the site was proven to be (attention: the mask structure)
    kernel: str = ""  # which of the target's kernels runs it, where the target has several (attention on ttx)
    node: str = ""  # the Mojo op's node in the rewritten graph (`graph`)


@dataclass
class NearMiss:
    """One site a family's tell-tale ops show was left unfused, and why: the pattern of that family that came
    closest and what refused it (the node that differed, or the check that said no, with its reason)."""
    family: str
    source: str  # module path of the unfused code ("" for the compiled module itself)
    ops: list[str]  # the tell-tale ATen ops left there
    pattern: str  # the closest pattern ("" if none came near)
    reason: str


@dataclass
class GraphReport:
    compile_id: str
    target: str
    inner_compiler: str
    sites: list[FusedSite] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    graph: str = ""  # the rewritten pre-dispatch ATen graph, as code
    near_misses: list[NearMiss] = field(default_factory=list)  # one per unfused site
    pieces: int = 1  # graphs the inner compiler made of it (pieces.py: the backward in pieces)

    def counts(self) -> Counter:
        return Counter(site.op for site in self.sites)


@dataclass
class Report:
    graphs: list[GraphReport] = field(default_factory=list)

    @property
    def sites(self) -> list[FusedSite]:
        return [site for graph in self.graphs for site in graph.sites]

    def counts(self) -> Counter:
        return Counter(site.op for site in self.sites)

    def to_dict(self) -> dict:
        return {"graphs": [asdict(g) for g in self.graphs]}

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def table(self) -> str:
        if not self.graphs:
            return "mojo_compile: no graph was compiled with backend='mojo'"
        lines = []
        for g in self.graphs:
            counts = ", ".join(f"{op} x{n}" for op, n in sorted(g.counts().items())) or "nothing fused"
            pieces = f" pieces={g.pieces}" if g.pieces > 1 else ""
            lines.append(f"graph {g.compile_id}  target={g.target} inner={g.inner_compiler}{pieces}  {counts}")
            rows = [("source", "pattern", "op", "target")] + [
                (s.source or ROOT, s.pattern, s.op, s.target + (f" (fallback: {s.fallback})" if s.fallback else "")
                 + (f"  [{s.detail}]" if s.detail else "") + (f"  [{s.kernel}]" if s.kernel else ""))
                for s in g.sites]
            widths = [max(len(r[i]) for r in rows) for i in range(3)]
            for row in rows:
                lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[3])
            lines.extend(f"  note: {note}" for note in g.notes)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


_REPORT = Report()
ROOT = "<root>"  # the source of code in the compiled module (or function) itself, where its name is unknown


def last_report() -> Report:
    """The graphs compiled with backend='mojo' since the last reset_report(), as a snapshot: later compiles and
    reset_report() do not change it (and changing it does not change the record)."""
    return Report([_copy_graph(g) for g in _REPORT.graphs])


def _copy_graph(graph: GraphReport) -> GraphReport:
    """A shallow copy with its own lists (sites, notes, ...); the site objects themselves are shared."""
    new = copy.copy(graph)
    for f in dataclasses.fields(graph):
        value = getattr(graph, f.name)
        if isinstance(value, list):
            setattr(new, f.name, list(value))
    return new


def unique_compile_id(compile_id: str) -> str:
    """`compile_id`, or `compile_id#2`, `#3` ... where a graph of the report already has it: Dynamo restarts its
    frame ids after torch._dynamo.reset(), so graphs compiled before and after a reset can share an id."""
    taken = {g.compile_id for g in _REPORT.graphs}
    unique, n = compile_id, 1
    while unique in taken:
        n += 1
        unique = f"{compile_id}#{n}"
    return unique


def reset_report() -> None:
    _REPORT.graphs.clear()


def add_graph(graph: GraphReport) -> None:
    _REPORT.graphs.append(graph)


def module_path(node: Node, root: bool = True) -> str:
    """`model.layers.0.input_layernorm` from Dynamo's nn_module_stack (kept through make_fx by preserve_node_meta).
    Code of the compiled module (or function) itself has no module path: it is named by root_name(), e.g.
    `<root: Llama>`, or "" with `root=False`."""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return root_name() if root else ""
    paths = [entry[0] for entry in stack.values()]
    # A module reached through a global (a user's module-level norm, or transformers' hub-kernel wrappers, which
    # turn `apply_rotary_pos_emb` into a module) has no path in the model: the site is named by the innermost
    # module of the model around it, or by the global's name where none is.
    in_model = [path for path in paths if not path.startswith("G[")]
    path = in_model[-1] if in_model else _global_name(paths[-1])
    path = re.sub(r"^L\['[^']*'\](\[\d+\])*\.?", "", path)  # L['self'] or L['args'][0]: the compiled module
    path = re.sub(r"\._modules\['([^']+)'\]", r".\1", path)
    path = re.sub(r"\[(\d+)\]", r".\1", path)
    path = re.sub(r"\['([^']+)'\]", r".\1", path)
    path = path.lstrip(".")
    return path or (root_name() if root else "")


def _global_name(path: str) -> str:
    """`G['norm']` -> `norm`; `G['__import_a_dot_b'].f` (Dynamo's name for a module it imported) -> `a.b.f`."""
    path = re.sub(r"^G\['__import_([^']+)'\]", lambda m: m.group(1).replace("_dot_", "."), path)
    return re.sub(r"^G\['([^']+)'\]", r"\1", path)


def root_name() -> str:
    """How the report names code of the compiled module itself: `<root: Llama>` (the class of the module being
    compiled), `<root: fn>` (a compiled function), else `<root>`. Dynamo's nn_module_stack leaves the compiled module
    out, so this asks the frame Dynamo is tracing (during a compile; `<root>` outside one)."""
    owner = _root_owner()
    return f"<root: {owner}>" if owner else ROOT


def _root_owner() -> str:
    import torch

    try:  # the frame's own `self`: the module's real class (also for a forward it inherits)
        from torch._dynamo.symbolic_convert import InstructionTranslator

        f_locals = InstructionTranslator.current_tx().f_locals
        module = f_locals.get("self")
        if not isinstance(module, torch.nn.Module):  # a decorator's `wrapped_func(*args, **kwargs)` around forward
            args = f_locals.get("args")
            module = args[0] if isinstance(args, tuple) and args else None
        if isinstance(module, torch.nn.Module):
            return type(module).__name__
    except Exception:  # not tracing, or a torch without these internals
        pass
    try:  # the traced code's qualified name: `Llama.forward`, `fn`, `Llama.torch_dynamo_resume_in_forward_at_9`
        from torch._guards import TracingContext

        context = TracingContext.try_get()
        code = context.traced_code[0] if context is not None and context.traced_code else None
    except Exception:
        code = None
    if code is None:
        return ""
    parts = getattr(code, "co_qualname", code.co_name).split("<locals>.")[-1].split(".")
    if len(parts) >= 2:
        return parts[-2]
    return re.sub(r"^torch_dynamo_resume_in_(.+)_at_\d+$", r"\1", parts[-1])
