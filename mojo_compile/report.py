"""What the backend did: per compiled graph, each fused site with its pattern, Mojo op, target and module path.

`mojo_compile.last_report()` returns the record of every graph compiled since the last `reset_report()`
(recompiles and graph breaks each add a graph, with Dynamo's compile id).
"""
from __future__ import annotations

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


@dataclass
class GraphReport:
    compile_id: str
    target: str
    inner_compiler: str
    sites: list[FusedSite] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    graph: str = ""  # the rewritten pre-dispatch ATen graph, as code

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
            lines.append(f"graph {g.compile_id}  target={g.target} inner={g.inner_compiler}  {counts}")
            rows = [("source", "pattern", "op", "target")] + [
                (s.source or "?", s.pattern, s.op, s.target + (f" (fallback: {s.fallback})" if s.fallback else "")
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


def last_report() -> Report:
    """The graphs compiled with backend='mojo' since the last reset_report()."""
    return _REPORT


def reset_report() -> None:
    _REPORT.graphs.clear()


def add_graph(graph: GraphReport) -> None:
    _REPORT.graphs.append(graph)


def module_path(node: Node) -> str:
    """`model.layers.0.input_layernorm` from Dynamo's nn_module_stack (kept through make_fx by preserve_node_meta)."""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    path = re.sub(r"^L\['[^']*'\](\[\d+\])*\.?", "", path)  # L['self'] or L['args'][0]: the compiled module
    path = re.sub(r"\._modules\['([^']+)'\]", r".\1", path)
    path = re.sub(r"\[(\d+)\]", r".\1", path)
    path = re.sub(r"\['([^']+)'\]", r".\1", path)
    return path.lstrip(".")
