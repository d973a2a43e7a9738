"""Every kernel's declared writes (@writes) equal what torch's TTIR analysis finds, for every configuration the
launchers choose, and no written buffer aliases another argument the kernel touches.

Why: under the Inductor inner compiler the kernels are inlined into Inductor's graph and functionalization trusts
that analysis. A kernel it believes writes cos got cos cloned and, cos being a batch-expanded view, summed back over
the batch: every batched model with a fused RoPE gave wrong logits on the GPU while the interpreter (which nothing
traces) passed (kernels/common.py). The analysis needs only Triton's front end, so this runs on the CPU, in a fresh
process with the interpreter off (tests/kernel_writes_probe.py)."""
import os
import subprocess
import sys

import pytest
import torch

import mojo_compile
from mojo_compile import lowering
from mojo_compile.kernels.common import NotInlinable
from mojo_compile.lowering.table import Impl
from mojo_compile.ops import rms_norm as rms_norm_ops

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _probe(*families: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"  # silences triton 3.9's notice; the default either way
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "kernel_writes_probe.py"), *families], env=env,
                       cwd=ROOT, capture_output=True, text=True, timeout=900)
    if "No module named 'triton.backends" in r.stderr or "cannot import name 'GPUTarget'" in r.stderr:
        pytest.skip("this Triton has no compiler front end to analyse")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    return [line for line in r.stdout.splitlines() if line.startswith(("OK", "BAD"))]


@pytest.mark.parametrize("family", ["rms_norm", "gated", "rope", "attention", "cross_entropy", "layer_norm"])
def test_declared_writes_match_torchs_analysis(family):
    lines = _probe(family)
    assert len(lines) >= (4 if family in ("cross_entropy", "layer_norm") else 10), lines
    bad = [line for line in lines if line.startswith("BAD")]
    assert not bad, "\n".join(bad[:20])


def test_the_check_flags_a_helper_returning_a_store_index():
    """The shape of the RoPE bug, planted: the check names the read-only pointer; the repaired kernel passes."""
    (line,) = _probe("selfcheck")
    assert line.startswith("OK"), line
    assert "'X', 'Y'" in line


def test_torchs_analysis_memoized_per_specialisation():
    """torch analyses a traced launch afresh each time (AOTAutograd twice, Inductor's lowering once more): ours are
    analysed once per specialisation, each answer torch's own; other kernels are left to torch."""
    (line,) = _probe("memocheck")
    assert line.startswith("OK"), line


def test_torchs_analysis_memoized_through_aotautograd():
    """The same through torch's own path, where each traced launch reaches the analysis in a fresh Autotuner
    wrapper: an AOTAutograd trace of 7 launches analyses each of 3 specialisations at most twice."""
    (line,) = _probe("aotcheck")
    assert line.startswith("OK"), line


def test_a_launch_torch_would_misread_keeps_the_op_whole():
    """NotInlinable raised while a launcher is traced: the op stays one custom op (run directly), numbers right."""
    calls = []

    def fn(x, weight, eps, weight_offset, cast):
        calls.append(type(x))
        if type(x) is not torch.Tensor:  # traced: what a misread launch raises (kernels/common.py)
            raise NotInlinable("planted")
        return rms_norm_ops.reference(x, weight, eps, weight_offset, cast)

    lowering.register_target("planted", lambda: {"rms_norm": Impl(fn, traceable=lambda *a: True)})

    def norm(x, w):
        return torch.ops.mojo.rms_norm(x, w, 1e-6, 0.0, "normed", "planted")[0]

    x, w = torch.randn(3, 5, 64), torch.randn(64)
    try:
        got = torch.compile(norm, backend="aot_eager")(x, w)
    finally:
        lowering._LOADERS.pop("planted", None)
        lowering._TABLES.pop("planted", None)
    expected = rms_norm_ops.reference(x, w, 1e-6, 0.0, "normed")[0]
    assert torch.equal(got, expected)
    assert torch.Tensor in calls and any(c is not torch.Tensor for c in calls), calls
    assert mojo_compile  # the ops are registered by the package import
