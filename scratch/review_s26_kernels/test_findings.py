"""Review s26 (kernels): one test per finding, each failing on the tree it was written against.

Run from /work/main:
    TRITON_INTERPRET=1 MOJO_CACHE_DIR=/tmp/kernels_cache PYTHONPATH=tests:. timeout 600 \
        .venv/bin/python -m pytest -q -p no:cacheprovider -W ignore scratch/review_s26_kernels/test_findings.py
"""
import json

import pytest
import torch

from conftest import KERNEL_TARGET_OK
import mojo_compile
from mojo_compile import tuner

mojo = torch.ops.mojo
assert mojo_compile  # the package import registers the mojo ops


# ------------------------------------------------------------------------------------------------------ finding 1
@pytest.fixture
def nan_filled_empty(monkeypatch):
    """torch.empty returns NaN-filled memory, so an output element a kernel never writes shows as NaN instead of
    whatever the allocator left there (the kernels allocate their outputs with torch.empty)."""
    empty = torch.empty

    def filled(*size, **kw):
        t = empty(*size, **kw)
        return t.fill_(float("nan")) if t.dtype.is_floating_point else t

    monkeypatch.setattr(torch, "empty", filled)


def _rope_both_targets(op, *args):
    """The op on ttx and on torch; None for a target whose call refuses the arguments (ValueError)."""
    results = {}
    for target in ("ttx", "torch"):
        try:
            results[target] = op(*args, target)
        except ValueError:
            results[target] = None
    return results


@pytest.mark.skipif(not KERNEL_TARGET_OK, reason="needs CUDA or TRITON_INTERPRET=1")
def test_rope_with_k_longer_than_q_rotates_every_row_of_k(nan_filled_empty):
    """mojo::rope takes q [B, Hq, 3, D] and k [B, Hkv, 5, D] with a cos / sin table of one position ([1, 1, R]),
    which broadcasts over both as eager's `q * cos + rotate_half(q) * sin` does. The torch target rotates all 5 rows
    of k; the ttx kernel walks q's B * S tokens only and leaves k's rows 3 and 4 unwritten (and, with k shorter than
    q, writes past k_out's end). Fixed means: both targets agree, or the op refuses such q / k on every target."""
    torch.manual_seed(0)
    q, k = torch.randn(2, 4, 3, 16), torch.randn(2, 2, 5, 16)
    angle = torch.randn(1, 1, 16)
    got = _rope_both_targets(mojo.rope, q, k, angle.cos(), angle.sin(), 16, False, 2, False)
    if got["ttx"] is None and got["torch"] is None:
        return  # refused everywhere: fixed by a shape check in the op
    assert got["ttx"] is not None and got["torch"] is not None, "one target refuses what the other computes"
    torch.testing.assert_close(got["ttx"][0], got["torch"][0])
    torch.testing.assert_close(got["ttx"][1], got["torch"][1])  # fails: k rows 3 and 4 are NaN (never written)


@pytest.mark.skipif(not KERNEL_TARGET_OK, reason="needs CUDA or TRITON_INTERPRET=1")
def test_qk_norm_rope_with_k_longer_than_q_normalises_every_row_of_k(nan_filled_empty):
    """The same for mojo::qk_norm_rope: ttx leaves k's rows past q's length unwritten and returns k_rstd shaped by
    q's length ([2, 3, 2]) where its fake impl and the torch target say [2, 5, 2]."""
    torch.manual_seed(0)
    q, k = torch.randn(2, 4, 3, 16), torch.randn(2, 2, 5, 16)
    angle = torch.randn(1, 1, 16)
    weight = torch.ones(16)
    got = _rope_both_targets(mojo.qk_norm_rope, q, k, weight, weight, 1e-6, 0.0, "normed", angle.cos(), angle.sin(),
                             16, False, 2, False)
    if got["ttx"] is None and got["torch"] is None:
        return
    assert got["ttx"] is not None and got["torch"] is not None, "one target refuses what the other computes"
    assert [t.shape for t in got["ttx"]] == [t.shape for t in got["torch"]]  # fails: k_rstd [2, 3, 2] vs [2, 5, 2]
    for mine, ref in zip(got["ttx"], got["torch"]):
        torch.testing.assert_close(mine, ref)


# ------------------------------------------------------------------------------------------------------ finding 2
def _timer(fn, device_type):
    return {"a": 2.0, "b": 1.0}[fn()]


CANDIDATES = {"a": lambda: "a", "b": lambda: "b"}


def test_tuner_with_an_unwritable_cache_still_chooses(monkeypatch, tmp_path):
    """MOJO_TUNE=1 with a cache location that cannot be written (a read-only home, a path through a file): the
    choice is still made (the pattern cache treats an unwritable directory the same way: slower, correct). The
    tuner raises instead (FileExistsError / PermissionError from _save), so every tuned op's call fails."""
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("MOJO_TUNE", "1")
    monkeypatch.setenv("MOJO_TUNE_CACHE", str(blocker / "tune.json"))
    monkeypatch.delenv("MOJO_DETERMINISTIC", raising=False)
    assert tuner.choose("op", "unwritable", CANDIDATES, "a", "cpu", timer=_timer) == "b"


@pytest.mark.parametrize("content", ["[]", '"tune"', json.dumps({"any": "flash"})],
                         ids=["a list", "a string", "an entry that is not a dict"])
def test_tuner_with_a_foreign_cache_file_still_chooses(monkeypatch, tmp_path, content):
    """A tune.json that is valid JSON but not the tuner's layout (another tool's file, an older format): the tuner
    should ignore what it cannot read, as pattern_cache does for its damaged files. It raises TypeError instead
    (`entries[full_key] = ...` on a list or string, `entries[full_key]["choice"]` on a string entry)."""
    path = tmp_path / "tune.json"
    monkeypatch.setenv("MOJO_TUNE", "1")
    monkeypatch.setenv("MOJO_TUNE_CACHE", str(path))
    monkeypatch.delenv("MOJO_DETERMINISTIC", raising=False)
    key = "entry"
    if content.startswith("{"):  # the entry for exactly this key is a bare string
        content = json.dumps({f"{tuner._environment('cpu')}|op|{key}": "a"})
    path.write_text(content)
    assert tuner.choose("op", key, CANDIDATES, "a", "cpu", timer=_timer) in CANDIDATES


@pytest.mark.skipif(not KERNEL_TARGET_OK, reason="needs CUDA or TRITON_INTERPRET=1")
def test_tuned_attention_runs_with_an_unwritable_cache(monkeypatch, tmp_path):
    """End to end: a decode-sized attention on ttx with MOJO_TUNE=1 (flash and split-KV are timed) and a cache
    path that cannot be created. Expected: eager's numbers; today: FileExistsError out of the op."""
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("MOJO_TUNE", "1")
    monkeypatch.setenv("MOJO_TUNE_CACHE", str(blocker / "tune.json"))
    monkeypatch.delenv("MOJO_DETERMINISTIC", raising=False)
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 3, 16), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16)
    out, _ = mojo.attention(q, k, v, None, None, 0.25, True, 0, 0.0, None, "ttx")
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(3, 8).tril(5).bool(),
                                                                scale=0.25)
    torch.testing.assert_close(out, expected)
