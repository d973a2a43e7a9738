"""The tuner: off by default, picks the fastest candidate once per (environment, op, shape bucket), keeps it on disk,
honours MOJO_DETERMINISTIC; and the attention lowering tuned end to end (under the interpreter on a CPU)."""
import json

import pytest
import torch

from conftest import DEVICE, KERNEL_TARGET_OK
from mojo_compile import tuner


@pytest.fixture
def tune(monkeypatch, tmp_path):
    monkeypatch.setenv("MOJO_TUNE", "1")
    monkeypatch.setenv("MOJO_TUNE_CACHE", str(tmp_path / "tune.json"))
    monkeypatch.delenv("MOJO_DETERMINISTIC", raising=False)
    return tmp_path / "tune.json"


def fake_timer(times, calls):
    def timer(fn, device_type):
        calls.append(fn())
        return times[fn()]
    return timer


def test_off_by_default(monkeypatch):
    monkeypatch.delenv("MOJO_TUNE", raising=False)
    candidates = {"a": lambda: "a", "b": lambda: "b"}
    assert tuner.choose("op", "k", candidates, "a", "cpu", timer=lambda fn, d: pytest.fail("timed")) == "a"


def test_fastest_is_chosen_once_and_cached(tune):
    calls = []
    candidates = {"a": lambda: "a", "b": lambda: "b", "c": lambda: "c"}
    timer = fake_timer({"a": 3.0, "b": 1.0, "c": 2.0}, calls)
    assert tuner.choose("op", "k", candidates, "a", "cpu", timer=timer) == "b"
    assert calls == ["a", "b", "c"]
    assert tuner.choose("op", "k", candidates, "a", "cpu", timer=timer) == "b"
    assert calls == ["a", "b", "c"]  # the cache answered
    entries = json.loads(tune.read_text())
    (key,) = entries
    assert key.endswith("|op|k") and f"torch {torch.__version__}" in key and entries[key]["choice"] == "b"


def test_a_failing_candidate_is_left_out(tune):
    def broken():
        raise RuntimeError("no kernel for this shape")
    timer = fake_timer({"a": 3.0}, [])
    assert tuner.choose("op", "k2", {"a": lambda: "a", "broken": broken}, "a", "cpu", timer=timer) == "a"


def test_deterministic_only(tune, monkeypatch):
    monkeypatch.setenv("MOJO_DETERMINISTIC", "1")
    timer = fake_timer({"a": 3.0, "b": 1.0}, [])
    assert tuner.choose("op", "k3", {"a": lambda: "a", "b": lambda: "b"}, "b", "cpu", deterministic={"a"},
                        timer=timer) == "a"


def test_bucket():
    assert tuner.bucket(1, 3, 4096, 4097, torch.bfloat16, True) == "1,4,4096,8192,torch.bfloat16,True"


@pytest.mark.skipif(not KERNEL_TARGET_OK, reason="needs CUDA or TRITON_INTERPRET=1")
def test_attention_tuned_end_to_end(tune):
    q = torch.randn(1, 4, 3, 16, device=DEVICE)
    k, v = (torch.randn(1, 2, 9, 16, device=DEVICE) for _ in range(2))
    out, _ = torch.ops.mojo.attention(q, k, v, None, None, 0.25, True, 0, 0.0, None, "ttx")
    ref, _ = torch.ops.mojo.attention(q, k, v, None, None, 0.25, True, 0, 0.0, None, "torch")
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    (entry,) = json.loads(tune.read_text()).values()
    assert entry["choice"] in ("flash", "split_kv") and set(entry["ms"]) == {"flash", "split_kv"}
