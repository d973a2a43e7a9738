"""Logging through torch's logging system: `TORCH_LOGS="+mojo"` shows each pass's decisions, `TORCH_TRACE` records
the graphs before and after rewriting and the report as artifacts that `tlparse` shows beside Inductor's.

Everything in the package logs to the `mojo_compile` logger; this module registers it with torch under the name
`mojo`, so these all work:

    TORCH_LOGS="+mojo" python run.py                        # DEBUG: every match, proven mask and target choice
    TORCH_LOGS="mojo" python run.py                         # INFO: one line per pass
    torch._logging.set_logs(modules={"mojo": logging.DEBUG})  # (set_logs has no keyword of its own for it)
    TORCH_TRACE=/tmp/trace python run.py; tlparse /tmp/trace/*.log

torch parses TORCH_LOGS when it is imported and rejects a name it does not know, and `mojo` is known only once this
module has run. So when this package is imported before torch, torch is imported here with TORCH_LOGS hidden and the
setting is applied once `mojo` is registered. When torch was imported first with TORCH_LOGS naming `mojo`, torch
itself has already refused it: spell it `TORCH_LOGS="+mojo_compile"` (any importable module name is accepted).
"""
from __future__ import annotations

import logging
import os
import sys
from typing import Callable

ALIAS = "mojo"
LOGGER = "mojo_compile"
ENV = "TORCH_LOGS"


def _names_alias(settings: str) -> bool:
    """Whether a TORCH_LOGS value names `mojo` (as `mojo`, `+mojo` or `-mojo`)."""
    return any(name.strip().strip("\"'").lstrip("+-") == ALIAS for name in settings.split(","))


_hidden = os.environ.pop(ENV) if "torch" not in sys.modules and _names_alias(os.environ.get(ENV, "")) else None
try:
    import torch
    import torch._logging
finally:
    if _hidden is not None:
        os.environ[ENV] = _hidden

log = logging.getLogger(LOGGER)


def _register() -> None:
    internal = getattr(torch._logging, "_internal", None)
    register_log = getattr(internal, "register_log", None)
    if register_log is None:  # a torch without the registry: the logger is still a plain `logging` logger
        return
    register_log(ALIAS, LOGGER)
    if _names_alias(os.environ.get(ENV, "")):  # torch parsed TORCH_LOGS before `mojo` existed: apply it again
        getattr(getattr(internal, "_parse_log_settings", None), "cache_clear", lambda: None)()
        internal._init_logs()


_register()


# ------------------------------------------------------------------------------------------------------ artifacts
def artifact(name: str, encoding: str, payload_fn: Callable[[], str]) -> None:
    """A structured-trace artifact (TORCH_TRACE / tlparse). payload_fn runs only when tracing is on."""
    trace_structured = getattr(torch._logging, "trace_structured", None)
    if trace_structured is None:
        return

    def payload() -> str:
        try:
            return payload_fn()
        except Exception as e:  # a broken artifact must not break the compile
            return f"<{name} unavailable: {type(e).__name__}: {e}>"

    trace_structured("artifact", metadata_fn=lambda: {"name": name, "encoding": encoding}, payload_fn=payload)


def _readable(gm) -> str:
    return gm.print_readable(print_output=False)


# ------------------------------------------------------------------------------------------------------ the passes
def traced(gm, target: str) -> None:
    """1. the pre-dispatch ATen graph, before any rewrite."""
    calls = sum(1 for n in gm.graph.nodes if n.op == "call_function")
    log.info("mojo: pre-dispatch ATen graph: %d nodes (%d calls), requested target %s",
             len(gm.graph.nodes), calls, target, stacklevel=2)
    artifact("mojo_before_rewrite", "string", lambda: _readable(gm))


def canonicalized(rewrites: int) -> None:
    """2. canonicalisation."""
    log.info("mojo: canonicalisation: %d rewrite(s)", rewrites, stacklevel=2)


def matched(matches, masks) -> None:
    """3. pattern matches (pattern -> op at module path) and attention masks proven."""
    from .report import module_path

    log.info("mojo: %d pattern match(es), %d attention mask(s) proven", len(matches), len(masks), stacklevel=2)
    if not log.isEnabledFor(logging.DEBUG):
        return
    for pattern, node in matches:
        log.debug("mojo: matched %s -> mojo.%s at %s", pattern.name, _op(node), module_path(node) or "<top>",
                  stacklevel=2)
    for node, structure in masks.items():
        log.debug("mojo: mask of mojo.attention at %s proven %s", module_path(node) or "<top>",
                  structure.describe(), stacklevel=2)


def targets_chosen(sites, requested: str) -> None:
    """4. the target of each fused site, with the reason when it is not the one requested."""
    fallbacks = sum(1 for s in sites if s.fallback)
    log.info("mojo: targets chosen for %d site(s), %d fallback(s) from %s", len(sites), fallbacks, requested,
             stacklevel=2)
    for s in sites:
        log.debug("mojo: %s (%s) at %s -> target %s%s", s.op, s.pattern, s.source or "<top>", s.target,
                  f" (fallback from {requested}: {s.fallback})" if s.fallback else "", stacklevel=2)


def rewritten(gm, graph_report) -> None:
    """5. the rewritten graph and its report, as trace artifacts."""
    from .report import Report

    counts = ", ".join(f"{op} x{n}" for op, n in sorted(graph_report.counts().items())) or "nothing fused"
    log.info("mojo: graph %s rewritten: %s", graph_report.compile_id, counts, stacklevel=2)
    artifact("mojo_after_rewrite", "string", lambda: _readable(gm))
    artifact("mojo_report", "json", lambda: Report([graph_report]).to_json(indent=1))


def _op(node) -> str:
    schema = getattr(node.target, "_schema", None)
    return schema.name.split("::")[-1] if schema is not None else str(node.target)
