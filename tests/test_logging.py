"""Logging through torch's logging system: TORCH_LOGS="+mojo" / set_logs(modules={"mojo": ...}) show each pass's
decisions, and TORCH_TRACE records the graphs before and after rewriting and the report as tlparse artifacts
(mojo_compile/logs.py)."""
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import mojo_compile  # noqa: F401  (registers the `mojo` log)
from test_rms_norm import Llama as RMSNorm  # the Llama spelling: rms_norm.llama

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import torch
from torch import nn
import mojo_compile  # backend="mojo" without the installed entry point (the GPU machine runs from the tree)

class RMSNorm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * x.to(dtype)

m = torch.compile(RMSNorm(32), backend="mojo", options={"inner_compiler": "eager", "target": "torch"})
m(torch.randn(4, 32))
print("ran")
"""
PROBE = """
import mojo_compile.logs
mojo_compile.logs.artifact("mojo_probe", "string", lambda: print("payload built") or "")
"""


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def mojo_logger(monkeypatch):
    """The mojo_compile logger with a recording handler; torch's log settings and the logger restored afterwards
    (set_logs makes a registered logger stop propagating, which other tests' caplog relies on)."""
    monkeypatch.delenv("TORCH_LOGS", raising=False)  # set_logs is ignored while TORCH_LOGS is set
    logger = logging.getLogger("mojo_compile")
    saved = logger.level, logger.propagate, list(logger.handlers)
    handler = _Records()
    logger.addHandler(handler)
    try:
        yield logger, handler
    finally:
        torch._logging.set_logs()
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
        for h in list(logger.handlers):
            if h not in saved[2]:
                logger.removeHandler(h)


def test_set_logs_shows_each_pass(mojo_logger):
    logger, handler = mojo_logger
    torch._logging.set_logs(modules={"mojo": logging.DEBUG})  # torch's own spelling for a registered log
    assert logger.isEnabledFor(logging.DEBUG)
    torch._logging.set_logs()
    assert logger.level != logging.DEBUG

    torch._logging.set_logs(modules={"mojo": logging.DEBUG})
    m = torch.compile(RMSNorm(32), backend="mojo", options={"inner_compiler": "eager", "target": "torch"})
    m(torch.randn(4, 32))
    messages = [r.getMessage() for r in handler.records if r.name == "mojo_compile"]
    text = "\n".join(messages)
    assert "pre-dispatch ATen graph" in text, text
    assert "canonicalisation" in text, text
    assert "matched rms_norm.llama -> mojo.rms_norm" in text, text
    assert "-> target torch" in text, text
    assert any(r.levelno == logging.DEBUG for r in handler.records)


def test_no_records_below_warning_by_default(mojo_logger):
    logger, handler = mojo_logger
    torch._logging.set_logs()
    m = torch.compile(RMSNorm(32), backend="mojo", options={"inner_compiler": "eager", "target": "torch"})
    m(torch.randn(4, 32))
    assert not [r for r in handler.records if r.levelno < logging.WARNING]


def _run(script, tmp_path, **env):
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(script))
    base = {k: v for k, v in os.environ.items() if k not in ("TORCH_LOGS", "TORCH_TRACE")}
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env=dict(base, PYTHONPATH=str(ROOT), **env))


@pytest.mark.parametrize("setting, first", [("+mojo", "import mojo_compile"), ("+mojo_compile", "import torch")])
def test_torch_logs_from_the_environment(tmp_path, setting, first):
    """`mojo` is registered when mojo_compile is imported (then TORCH_LOGS is applied again); torch imported first
    checks TORCH_LOGS before that, so there the module name is the spelling (docs/design.md, Logging)."""
    done = _run(first + "\n" + SCRIPT + PROBE, tmp_path, TORCH_LOGS=setting)
    assert done.returncode == 0, done.stderr
    assert "ran" in done.stdout
    assert "payload built" not in done.stdout  # without TORCH_TRACE, no artifact payload is computed
    assert "mojo: matched rms_norm.llama -> mojo.rms_norm" in done.stderr, done.stderr
    assert "mojo: canonicalisation" in done.stderr, done.stderr


def test_torch_trace_has_the_mojo_artifacts(tmp_path):
    trace = tmp_path / "trace"
    done = _run(SCRIPT, tmp_path, TORCH_TRACE=str(trace))
    assert done.returncode == 0, done.stderr
    lines = [line for f in trace.iterdir() for line in f.read_text().splitlines()]
    names = set()
    for line in lines:
        if '"artifact"' in line and not line.startswith("\t"):
            names.add(json.loads(line[line.index("{"):])["artifact"]["name"])
    assert {"mojo_before_rewrite", "mojo_after_rewrite", "mojo_report"} <= names, names
    text = "\n".join(lines)
    assert "torch.ops.mojo.rms_norm" in text and '"pattern": "rms_norm.llama"' in text
