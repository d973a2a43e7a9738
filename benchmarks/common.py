"""Shared helpers of the GPU benchmarks: timing, the copy-bandwidth ceiling, optional peers, table printing."""
from __future__ import annotations

import statistics
from typing import Callable, Optional

import torch


def bench(fn: Callable, cudagraph: bool = True, rep_ms: int = 100) -> float:
    """Median time of fn in microseconds. With cudagraph=True the calls are captured in a CUDA graph and replayed,
    which measures GPU time without the Python launch overhead (same for every implementation)."""
    import triton.testing as tt

    fn()
    torch.cuda.synchronize()
    if cudagraph:
        return tt.do_bench_cudagraph(fn, rep=rep_ms, return_mode="median") * 1e3
    return tt.do_bench(fn, rep=rep_ms, return_mode="median") * 1e3


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
