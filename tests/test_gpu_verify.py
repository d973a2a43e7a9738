"""scripts/gpu_verify.py's sharding: files dealt out by their GPU seconds from junit reports, each file in one
shard."""
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def gpu_verify():
    spec = importlib.util.spec_from_file_location("gpu_verify", os.path.join(ROOT, "scripts", "gpu_verify.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
