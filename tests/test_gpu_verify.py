"""scripts/gpu_verify.py's sharding: files dealt out by their GPU seconds from junit reports, each file in one
shard."""
import json
import os

import pytest

from conftest import ROOT, load_script


@pytest.fixture(scope="module")
def gpu_verify():
    return load_script("scripts", "gpu_verify.py")


def test_file_seconds_sums_each_files_tests(gpu_verify, tmp_path):
    """Module-level tests, tests in a class and a file in a subfolder each add to their own file."""
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.test_rope" name="test_a[1]" time="1.5"/>'
        '<testcase classname="tests.test_rope" name="test_a[2]" time="2.0"><skipped/></testcase>'
        '<testcase classname="tests.test_api.TestOptions" name="test_b" time="0.25"/>'
        '<testcase classname="tests.conformance.test_conformance" name="test_c" time="4"/>'
        '<testcase classname="not_a_test_file" name="test_d" time="9"/>'
        '</testsuite></testsuites>')
    assert gpu_verify.file_seconds(str(junit)) == {
        os.path.join("tests", "test_rope.py"): 3.5, os.path.join("tests", "test_api.py"): 0.25,
        os.path.join("tests", "conformance", "test_conformance.py"): 4.0}


def test_shards_are_dealt_by_seconds(gpu_verify):
    """Every file lands in exactly one shard; a file measured far heavier than the rest gets a shard of its own,
    and a file without a time counts its size at the measured seconds per byte."""
    files = gpu_verify.test_files()
    heavy, light = files[0], files[1:]
    seconds = {heavy: 1e6, **{p: 1.0 for p in light[:-1]}}
    shards = [gpu_verify.shard_files(k, 3, seconds) for k in (1, 2, 3)]
    assert sorted(p for shard in shards for p in shard) == files
    assert [heavy] in shards
    weights = gpu_verify.file_weights(files, seconds)
    unknown = light[-1]
    size = os.path.getsize(os.path.join(ROOT, unknown))
    known_bytes = sum(os.path.getsize(os.path.join(ROOT, p)) for p in seconds)
    assert weights[unknown] == pytest.approx(size * sum(seconds.values()) / known_bytes)
    others = [s for s in shards if s != [heavy]]
    loads = [sum(weights[p] for p in shard) for shard in others]
    assert max(loads) - min(loads) <= max(weights[p] for p in light)  # greedy: within one file of even


@pytest.mark.parametrize("on_file", [None, {"tests/test_old.py": 7.0}])
def test_merge_writes_the_record_and_the_file_seconds(gpu_verify, tmp_path, monkeypatch, on_file):
    """A merge records the counts and keeps the seconds on file beside the new ones, whether or not a seconds
    file exists yet (it is read before it is rewritten)."""
    seconds_file = tmp_path / "test_seconds.json"
    if on_file is not None:
        seconds_file.write_text(json.dumps(on_file))
    monkeypatch.setattr(gpu_verify, "SECONDS_FILE", str(seconds_file))
    files = gpu_verify.test_files()
    part = {"tree": "0" * 40, "started": "2026-12-03T16:04:00+00:00", "seconds": 5,
            "versions": dict.fromkeys(["gpu", "python", "torch", "triton", "transformers"], "x"),
            "command": "python -m pytest tests", "exit": 0, "cut": False, "shard": [1, 1], "files": files,
            "counts": {"passed": 3, "failed": 0, "errors": 0, "skipped": 1}, "failures": [],
            "file_seconds": {files[0]: 2.5}}
    (tmp_path / "part1.json").write_text(json.dumps(part))
    out = tmp_path / "GPU_VERIFIED.md"
    assert gpu_verify.merge([str(tmp_path / "part1.json")], str(out)) == 0
    assert "0" * 40 in out.read_text()
    assert json.loads(seconds_file.read_text()) == {**(on_file or {}), files[0]: 2.5}


def test_failures_are_logged_as_they_happen(gpu_verify, tmp_path):
    """A run cut by the device's time limit writes no junit report: the failure log (MOJO_FAILURE_LOG, written by
    tests/conftest.py per failing report) still names each failure once, with the end of its report."""
    import subprocess
    import sys

    (tmp_path / "test_sample.py").write_text(
        "def test_passes():\n    assert 1 + 1 == 2\n\n"
        "def test_fails():\n    assert [1, 2] == [1, 3], 'the marker of this failure'\n")
    log = gpu_verify.failure_log_path(str(tmp_path / "part9.json"))
    env = {**os.environ, "MOJO_FAILURE_LOG": log,  # the package from this tree: installed only on CPU machines
           "PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "tests"), ROOT])}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
                    str(tmp_path / "test_sample.py")], cwd=tmp_path, env=env, capture_output=True, timeout=300)
    assert gpu_verify.logged_failures(log) == ["test_sample.py::test_fails"]
    with open(log) as f:
        assert "the marker of this failure" in json.loads(f.readline())["tail"]
