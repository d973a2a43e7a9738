"""Shared helpers of the GPU benchmarks: timing, the copy-bandwidth ceiling, optional peers, table printing."""
from __future__ import annotations

import gc
import statistics
from importlib import metadata
from typing import Callable, Optional

import torch

# HF config kwargs of the 8B-dims stand-ins (layers set by each benchmark): the train, decode and compile benchmarks'
# models, and the tiny dims their --tiny runs use on the CPU.
LLAMA3_8B_DIMS = dict(
    vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
    head_dim=128, rms_norm_eps=1e-5, max_position_embeddings=131072,
    rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                         high_freq_factor=4.0, original_max_position_embeddings=8192))
QWEN3_8B_DIMS = dict(
    vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_attention_heads=32, num_key_value_heads=8,
    head_dim=128, rms_norm_eps=1e-6, max_position_embeddings=40960,
    rope_parameters=dict(rope_type="default", rope_theta=1000000.0))
TINY_DIMS = dict(vocab_size=517, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                 head_dim=16)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def cleanup(device: str) -> None:
    """Between compiled variants: Dynamo's caches dropped, memory returned."""
    torch._dynamo.reset()
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def versions(labels: Optional[dict] = None) -> dict:
    """torch's version and those of the other packages installed ({distribution: label}; default triton and
    transformers), for a results table's heading."""
    out = {"torch": torch.__version__}
    for dist, label in (labels or {"triton": "triton", "transformers": "transformers"}).items():
        try:
            out[label] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def bench(fn: Callable, cudagraph: bool = True, rep_ms: int = 100) -> float:
    """Median time of fn in microseconds. With cudagraph=True the calls are captured in a CUDA graph and replayed,
    which measures GPU time without the Python launch overhead (same for every implementation)."""
    import triton.testing as tt

    fn()
    torch.cuda.synchronize()
    if cudagraph:
        return tt.do_bench_cudagraph(fn, rep=rep_ms, return_mode="median") * 1e3
    return tt.do_bench(fn, rep=rep_ms, return_mode="median") * 1e3


def _profiled(fn: Callable, steps: int):
    """torch.profiler's record of the GPU work of `steps` plain calls of fn."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    return prof


def kernel_time(fn: Callable, steps: int = 10) -> float:
    """GPU time of fn's kernels (and copies) per call in microseconds, from torch.profiler: the sum of the device
    events of `steps` calls, divided by steps. Unlike a plain-call timing it leaves out host launch overhead, and
    unlike a CUDA graph it works for code that cannot be captured (autograd's backward)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    events = _profiled(fn, steps).events()
    return sum(e.time_range.elapsed_us() for e in events if e.device_type == torch.autograd.DeviceType.CUDA) / steps


def print_kernel_table(title: str, fn: Callable, steps: int = 20, top: int = 14) -> None:
    """The GPU kernels of `steps` plain calls of fn (not graph replays: a replay's kernels are not listed), by total
    GPU time: where the time goes, impl by impl."""
    prof = _profiled(fn, steps)
    print(f"\n{title}: GPU kernels over {steps} calls (per call: total / {steps})")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=top, max_name_column_width=70))


def copy_bandwidth() -> float:
    """Device-to-device copy in bytes/s, counting bytes read and written (the ceiling of a memory-bound kernel)."""
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    us = bench(lambda: dst.copy_(src), cudagraph=False, rep_ms=200)
    return 2 * n / (us * 1e-6)


def liger() -> Optional[object]:
    try:
        import liger_kernel.ops.fused_add_rms_norm as add_rms
        import liger_kernel.ops.layer_norm as layer_norm
        import liger_kernel.ops.rms_norm as rms
        return rms, add_rms, layer_norm
    except Exception as e:
        print(f"Liger Kernel not importable ({type(e).__name__}: {e}); its column stays empty")
        return None


def fmt(x: Optional[float], width: int = 8) -> str:
    return f"{x:{width}.1f}" if x is not None else f"{'-':>{width}}"


def print_table(title: str, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    print(f"\n{title}")
    print("| " + " | ".join(h.rjust(w) for h, w in zip(header, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(str(c).rjust(w) for c, w in zip(r, widths)) + " |")


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def median(xs):
    return statistics.median(xs)
