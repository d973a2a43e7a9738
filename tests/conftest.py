"""Test setup: on a machine without CUDA the Triton kernels run in the interpreter (CPU tensors), so the same tests
check the kernels in CI and natively on a GPU."""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import zlib

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # read when the kernels are defined: before any import of them

if "MOJO_CACHE_DIR" not in os.environ:  # pattern traces and tuner choices: never the user's ~/.cache; one directory
    # for the run, which pytest-xdist's workers inherit (so most of the suite runs on cached traces, as users do)
    os.environ["MOJO_CACHE_DIR"] = tempfile.mkdtemp(prefix="mojo-test-cache-")
    atexit.register(shutil.rmtree, os.environ["MOJO_CACHE_DIR"], True)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
KERNEL_TARGET_OK = DEVICE == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"
# The targets the adversarial suites run: the torch reference and ttx with the eager inner compiler, and the torch
# reference under Inductor ("torch+inductor", the default inner compiler; slow on the CPU, so a chosen subset).
TARGETS = ["torch"] + (["ttx"] if KERNEL_TARGET_OK else [])
WITH_INDUCTOR = TARGETS + ["torch+inductor"]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}  # the kernels' dtypes, by test id


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_in_fresh_process(code: str, *args: str, cache_dir=None, timeout: int = 600) -> str:
    """`code` (dedented) run by a fresh Python in the repository root with tests/ importable, `args` its argv: for a
    test of process-wide state (the pattern registry, canonicalisation rules, Dynamo's caches, what loads first).
    With `cache_dir`, that MOJO_CACHE_DIR and the pattern cache on. Its stdout; the test fails with its stderr where
    it exits non-zero."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "tests"), ROOT])}
    if cache_dir is not None:
        env["MOJO_CACHE_DIR"] = str(cache_dir)
        env.pop("MOJO_PATTERN_CACHE", None)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-1000:]
    return proc.stdout


def pytest_runtest_logreport(report):
    """With MOJO_FAILURE_LOG set (scripts/gpu_verify.py sets it), each failure is appended to that file as it
    happens -- its test id and the end of its report, one JSON line -- so a run cut by the device's time limit
    still names its failures and shows why. (Under pytest-xdist the controller and the worker both see the
    report: the reader drops the repeat.)"""
    path = os.environ.get("MOJO_FAILURE_LOG")
    if path and report.failed:
        import json
        tail = "\n".join(report.longreprtext.splitlines()[-40:])
        with open(path, "a") as f:
            f.write(json.dumps({"test": report.nodeid, "when": report.when, "tail": tail}) + "\n")


def load_script(*path: str):
    """A script of the repository (scripts/, benchmarks/) imported as a module, by its path below the root; kept in
    sys.modules under its name while the tests use it (dataclasses resolve annotations through sys.modules)."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(os.path.splitext(path[-1])[0], os.path.join(ROOT, *path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def interpreter_loops_from_a_program_id() -> bool:
    """Whether this Triton's interpreter runs `range(tl.program_id(0), n, tl.num_programs(0))` (3.9 does; 3.6's
    turns the program id into a 1-element array that `range` refuses): the persistent kernels' loop. Compiled
    kernels always do."""
    if DEVICE == "cuda":
        return True
    import triton
    import triton.language as tl

    @triton.jit
    def count(X, N):
        for i in range(tl.program_id(0), N, tl.num_programs(0)):
            tl.store(X + i, i)
    x = torch.zeros(4, dtype=torch.int32)
    try:
        count[(2,)](x, 4)
    except Exception:  # noqa: BLE001 - any failure means no
        return False
    return x.tolist() == [0, 1, 2, 3]


def rel(out, ref) -> float:
    """The normwise relative error of `out` against `ref`, in fp64 (0 where both are zero)."""
    out, ref = out.detach().double().cpu(), ref.detach().double().cpu()
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def mojo_options(target: str) -> dict:
    """backend options for a target as the adversarial tests name it: "torch", "ttx", "torch+inductor"."""
    name, _, inner = target.partition("+")
    return {"target": name, "inner_compiler": inner or "eager"}


@pytest.fixture(autouse=True)
def _fresh_state():
    """Each test starts with fresh random inputs of its own, no Dynamo cache and an empty report."""
    import mojo_compile

    torch._dynamo.reset()
    mojo_compile.reset_report()
    torch.manual_seed(zlib.crc32(os.environ.get("PYTEST_CURRENT_TEST", "").encode()))  # stable across processes
    yield
    torch._dynamo.reset()
