"""benchmarks/trace_gaps.py: the GPU's idle gaps in a profiler timeline, each charged to the host op that launched
the kernel ending it late, on a synthetic Kineto trace."""
import gzip
import json

import pytest

from conftest import load_script


@pytest.fixture(scope="module")
def trace_gaps():
    return load_script("benchmarks", "trace_gaps.py")


def _kernel(name, ts, dur, corr, stream=7):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur,
            "args": {"correlation": corr, "stream": stream}}


def _launch(ts, corr, name="cudaLaunchKernel"):
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "ts": ts, "dur": 2, "args": {"correlation": corr}}


def _op(name, ts, dur):
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "args": {}}


def test_gaps_are_charged_to_the_late_launchs_innermost_op(trace_gaps, tmp_path):
    events = [
        # two streams overlapping: one busy stretch 0..30, no gap inside
        _kernel("gemm_a", 0, 20, 1), _kernel("norm_b", 10, 20, 2, stream=8),
        _launch(-5, 1), _launch(-4, 2),
        # 30..100 idle; the next kernel was launched at 90 inside aten::add under autograd's node: host-late
        _op("AccumulateGrad", 80, 30), _op("aten::add_", 85, 10), _launch(90, 3),
        _kernel("add_kernel", 100, 10, 3),
        # 110..113 idle: under min_us, not a gap
        _launch(50, 4), _kernel("gemm_c", 113, 7, 4),
        # 120..150 idle, launched early (at 60): the device's own wait; a sync runs inside the gap
        _launch(60, 5), {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": 121, "dur": 25,
                         "args": {}},
        _kernel("attn_bwd", 150, 10, 5),
        {"ph": "i", "cat": "instant", "name": "ignored", "ts": 1},
    ]
    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    found = trace_gaps.gaps(trace_gaps.load(str(path)), min_us=5)
    assert [(g["us"], g["before"], g["after"], g["charged"], g["sync"]) for g in found] == [
        (70.0, "norm_b", "add_kernel", "aten::add_", None),
        (30.0, "gemm_c", "attn_bwd", "(launched in time)", "cudaStreamSynchronize")]
    text = trace_gaps.summary(found, steps=2, top=5)
    assert "2 gaps, 0.10 ms in all, 0.05 ms per step" in text
    assert "aten::add_" in text and "cudaStreamSynchronize" in text
