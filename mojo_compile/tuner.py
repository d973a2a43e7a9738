"""The tuner: per op and shape bucket, time the candidate implementations once and keep the fastest.

    MOJO_TUNE=1                  tune (off by default: CI and first runs use each op's heuristic choice)
    MOJO_TUNE_CACHE=path.json    where choices are kept (default tune.json in MOJO_CACHE_DIR, ~/.cache/mojo_compile)
    MOJO_DETERMINISTIC=1         only candidates marked deterministic take part

A choice is keyed by the device, the torch and triton versions, the op and a shape bucket (each size rounded up to a
power of two, dtypes and flags as they are), so a cache never serves another GPU or software stack. Timing runs on
fresh random inputs built from the (possibly fake) arguments' metadata, so a choice can be made while Inductor
traces the op with fake tensors. Every candidate must compute the same thing; the tuner only picks the fastest.
"""
from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import time
from typing import Callable, Optional

import torch

log = logging.getLogger("mojo_compile")


def enabled() -> bool:
    return os.environ.get("MOJO_TUNE", "0") == "1"


def deterministic_only() -> bool:
    return os.environ.get("MOJO_DETERMINISTIC", "0") == "1"


def cache_path() -> str:
    from .pattern_cache import cache_dir
    return os.environ.get("MOJO_TUNE_CACHE") or os.path.join(cache_dir(), "tune.json")


def bucket(*values) -> str:
    """Sizes rounded up to powers of two; everything else (dtypes, flags) as it is."""
    def one(v):
        if isinstance(v, bool) or not isinstance(v, int):
            return str(v)
        return str(1 << max(v - 1, 0).bit_length()) if v > 0 else "0"
    return ",".join(one(v) for v in values)


@functools.cache
def _environment(device_type: str) -> str:
    module = getattr(torch, device_type, None)  # torch.cuda; torch.npu where torch_npu is imported
    available = module is not None and hasattr(module, "get_device_name") and module.is_available()
    name = module.get_device_name() if available else device_type
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:  # pragma: no cover
        triton_version = "none"
    return f"{name}|torch {torch.__version__}|triton {triton_version}"


def _load() -> dict:
    """The cached choices; {} where the file is missing, unreadable or not this tuner's layout (another tool's
    file, an older format): the choices are then timed again."""
    try:
        with open(cache_path()) as f:
            entries = json.load(f)
    except (OSError, ValueError):
        return {}
    return entries if isinstance(entries, dict) else {}


def _cached_choice(entries: dict, key: str) -> Optional[str]:
    entry = entries.get(key)
    choice = entry.get("choice") if isinstance(entry, dict) else None
    return choice if isinstance(choice, str) else None


def _save(entries: dict) -> None:
    """Write the choices; a location that cannot be written (a read-only home) only costs the timing again in the
    next process, as the pattern cache's does."""
    path = cache_path()
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(tmp, "w") as f:
            json.dump(entries, f, indent=1, sort_keys=True)
        os.replace(tmp, path)  # atomic: concurrent tuners never leave a torn file
    except OSError as e:
        log.debug("mojo tune: the choices are not kept (%s: %s)", path, e)


def _default_timer(fn: Callable[[], object], device_type: str) -> float:
    """Median milliseconds of fn."""
    if device_type == "cuda":
        import triton.testing
        return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median")
    # Elsewhere (an NPU, the CPU): wall time around the device's own synchronize, as launches are asynchronous.
    module = getattr(torch, device_type, None)
    synchronize = getattr(module, "synchronize", None) if device_type != "cpu" else None

    def timed() -> float:
        start = time.perf_counter()
        fn()
        if synchronize is not None:
            synchronize()
        return (time.perf_counter() - start) * 1e3
    fn()
    if synchronize is not None:
        synchronize()
    times = sorted(timed() for _ in range(5 if synchronize is None else 20))
    return times[len(times) // 2]


def choose(op: str, key: str, candidates: dict[str, Callable[[], object]], default: str, device_type: str,
           deterministic: Optional[set] = None, timer: Optional[Callable] = None) -> str:
    """The candidate to run for (op, key). `candidates` maps a name to a zero-argument function running it on
    representative inputs; `default` is the heuristic choice, used when tuning is off. `deterministic` names the
    candidates that are run-to-run deterministic (all when None)."""
    if deterministic_only() and deterministic is not None:
        candidates = {n: fn for n, fn in candidates.items() if n in deterministic}
        default = default if default in candidates else next(iter(candidates))
    if not enabled() or len(candidates) < 2:
        return default
    full_key = f"{_environment(device_type)}|{op}|{key}" + ("|deterministic" if deterministic_only() else "")
    cached = _cached_choice(_load(), full_key)
    if cached in candidates:
        return cached
    timer = timer or _default_timer
    results = {}
    for i, (name, fn) in enumerate(candidates.items()):
        log.warning("mojo tune %s [%s]: timing %s (%d/%d)", op, key, name, i + 1, len(candidates))
        try:
            results[name] = timer(fn, device_type)
        except Exception as e:  # a candidate that fails on this shape is out, with the reason said
            log.warning("mojo tune %s [%s]: %s failed: %s", op, key, name, e)
    if not results:
        return default
    best = min(results, key=results.get)
    log.warning("mojo tune %s [%s]: %s -> %s", op, key,
                ", ".join(f"{n} {t:.3f} ms" for n, t in results.items()), best)
    entries = _load()  # another process may have written meanwhile
    entries[full_key] = {"choice": best, "ms": results}
    _save(entries)
    return best


@contextlib.contextmanager
def real_tensors():
    """Outside any tracing: no fake mode, no functionalization, no autograd -- to run candidates for real."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.utils._python_dispatch import _disable_current_modes

    from .lowering import launch_directly

    with unset_fake_temporarily(), _disable_current_modes(), torch.no_grad(), launch_directly():
        yield


def like(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """A fresh real tensor with t's shape, dtype and device (t may be fake): inputs to time candidates on."""
    if t is None:
        return None
    shape = [int(s) for s in t.shape]
    if t.dtype == torch.bool:
        return torch.ones(shape, dtype=torch.bool, device=t.device)
    if not t.dtype.is_floating_point:
        return torch.arange(int(torch.tensor(shape).prod()), device=t.device).reshape(shape).to(t.dtype)
    return torch.randn(shape, dtype=t.dtype, device=t.device)
