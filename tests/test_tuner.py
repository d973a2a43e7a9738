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
    out, _ = torch.ops.mojo.attention(q, k, v, mask=None, q_pos=None, scale=0.25, causal=True, target="ttx")
    ref, _ = torch.ops.mojo.attention(q, k, v, mask=None, q_pos=None, scale=0.25, causal=True, target="torch")
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    (entry,) = json.loads(tune.read_text()).values()
    assert entry["choice"] in ("flash", "split_kv") and set(entry["ms"]) == {"flash", "split_kv"}


@pytest.mark.skipif(not KERNEL_TARGET_OK, reason="needs CUDA or TRITON_INTERPRET=1")
def test_attention_backward_tuned_on_its_own(tune, monkeypatch):
    """Where torch's kernels apply, MOJO_TUNE times the backwards themselves and keeps the fastest under its own
    key, whatever the forward chose; the gradients are right with that mix. (On a CPU torch's kernels are made
    to apply here, and their backward is stood in for by ours, recording that it was called.)"""
    from mojo_compile.lowering import attention_choice as choice

    monkeypatch.setattr(choice, "sdpa_reason", lambda *args: None)
    monkeypatch.setattr(choice, "cudnn_available", lambda: False)  # heuristic: our kernels
    ran = []

    def sdpa_bwd(kernel, grad_out, q, k, v, out, lse, scale, causal):
        ran.append(kernel)
        return choice.attn_kernels.attention_bwd(grad_out, q, k, v, out, lse, scale, causal=causal)[:3]

    monkeypatch.setattr(choice, "sdpa_backward", sdpa_bwd)
    forward_ms = {"flash": 1.0, "split_kv": 4.0, "sdpa_cudnn": 2.0, "sdpa_flash": 3.0}
    backward_ms = {"flash": 3.0, "sdpa_cudnn": 2.0, "sdpa_flash": 1.0}

    def timer(fn, device_type):  # the candidates are partials: (run_forward, name, ...) or a backward
        if fn.func is choice.run_forward:
            return forward_ms[fn.args[0]]
        return backward_ms["flash" if fn.func is choice.attn_kernels.attention_bwd else fn.args[0]]

    monkeypatch.setattr(tuner, "_default_timer", timer)
    q = torch.randn(1, 4, 24, 16, device=DEVICE, requires_grad=True)
    k, v = (torch.randn(1, 2, 24, 16, device=DEVICE, requires_grad=True) for _ in range(2))
    out, _ = torch.ops.mojo.attention(q, k, v, mask=None, q_pos=None, scale=0.25, causal=True, target="ttx")
    grads = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    entries = {key.split("|")[-2]: entry for key, entry in json.loads(tune.read_text()).items()}
    assert entries["attention"]["choice"] == "flash" and entries["attention_backward"]["choice"] == "sdpa_flash"
    assert set(entries["attention_backward"]["ms"]) == {"flash", "sdpa_cudnn", "sdpa_flash"}
    assert ran == ["sdpa_flash"]
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(q64, k64.repeat_interleave(2, 1),
                                                           v64.repeat_interleave(2, 1), is_causal=True, scale=0.25)
    for g, g64 in zip(grads, torch.autograd.grad(ref, (q64, k64, v64), torch.ones_like(ref))):
        torch.testing.assert_close(g.double(), g64, rtol=1e-4, atol=1e-5)


def test_an_unwritable_cache_still_chooses(tune, monkeypatch, tmp_path):
    """A cache location that cannot be written (a read-only home, a path through a file) costs the timing again
    in the next process; the choice is still made, and a tuned op still runs."""
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("MOJO_TUNE_CACHE", str(blocker / "tune.json"))
    calls = []
    assert tuner.choose("op", "k", {"a": lambda: "a", "b": lambda: "b"}, "a", "cpu",
                        timer=fake_timer({"a": 2.0, "b": 1.0}, calls)) == "b"
    if KERNEL_TARGET_OK:
        torch.manual_seed(0)
        q, k, v = (torch.randn(1, 2, s, 16, device=DEVICE) for s in (3, 8, 8))
        out, _ = torch.ops.mojo.attention(q, k, v, None, None, 0.25, True, 0, 0.0, None, "ttx")
        keep = torch.ones(3, 8, device=DEVICE).tril(5).bool()  # bottom-right causal: query i sees keys <= i + 5
        expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=0.25)
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)  # fp32, another summation order


@pytest.mark.parametrize("content", ["[]", '"tune"', "entry"], ids=["a list", "a string", "an entry not a dict"])
def test_a_cache_file_of_another_layout_is_timed_again(tune, content):
    """A tune.json that is JSON but not the tuner's layout (another tool's, an older format) is read as empty."""
    if content == "entry":
        content = json.dumps({f"{tuner._environment('cpu')}|op|k": "a"})
    tune.write_text(content)
    calls = []
    assert tuner.choose("op", "k", {"a": lambda: "a", "b": lambda: "b"}, "a", "cpu",
                        timer=fake_timer({"a": 2.0, "b": 1.0}, calls)) == "b"
    assert sorted(calls) == ["a", "b"]
