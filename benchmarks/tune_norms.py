"""Sweep the launch configs of the RMSNorm kernels and compare them with the built-in heuristic.

    python benchmarks/tune_norms.py

Prints, per shape, the heuristic's time and the best (BLOCK_M, num_warps[, programs per SM]) found, in
microseconds (CUDA-graph replays). Used to set the heuristics in mojo_compile/kernels/rms_norm.py.
"""
from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import bench, copy_bandwidth, print_table  # noqa: E402

from mojo_compile.kernels import rms_norm as k  # noqa: E402

SHAPES = [(m, n) for n in (2048, 4096, 8192) for m in (1, 128, 4096, 16384)] + [(16384 * 8, 128)]
if "--only" in sys.argv:  # e.g. --only 4096x8192,16384x8192
    SHAPES = [tuple(int(v) for v in s.split("x")) for s in sys.argv[sys.argv.index("--only") + 1].split(",")]
BWD_SHAPES = [(16384, 2048), (16384, 4096), (4096, 8192), (16384 * 8, 128)]


def main():
    bw = copy_bandwidth()
    rows = []
    for m, n in SHAPES:
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        r = torch.randn_like(x)
        w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        for residual in (None, r):
            def run(config=None):
                return k.rms_norm_fwd(x, residual, w, 1e-6, 0.0, "normed", torch.bfloat16, config)
            base = bench(run)
            best = (base, "heuristic")
            block_n = 1 << (n - 1).bit_length()
            for block_m in (1, 2, 4, 8, 16, 32, 64):
                if block_m * block_n > 16384 or block_m > m:
                    continue
                for warps in (2, 4, 8, 16):
                    if warps * 32 > block_m * block_n:
                        continue
                    for evict in (False, True):
                        try:
                            t = bench(lambda: run((block_m, warps, evict)), rep_ms=25)
                        except Exception:
                            continue
                        if t < best[0]:
                            best = (t, f"BLOCK_M={block_m} warps={warps} evict={evict}")
            for loop_n in (1024, 2048, 4096):  # the two-pass kernel (second read from L2) for long rows
                if m < 4096 or loop_n >= n:
                    continue
                for warps in (4, 8, 16):
                    t = bench(lambda: run(("loop", loop_n, warps)), rep_ms=25)
                    if t < best[0]:
                        best = (t, f"loop BLOCK_N={loop_n} warps={warps}")
            nbytes = (4 if residual is not None else 2) * m * n * 2
            rows.append([f"{'add_' if residual is not None else ''}rms fwd {m}x{n}", f"{base:.1f}",
                         f"{best[0]:.1f}", best[1], f"{100 * nbytes / (best[0] * 1e-6) / bw:.0f}%"])
        if (m, n) not in BWD_SHAPES:
            continue
        # backward
        rstd = torch.rand(m, device="cuda") + 0.5
        dy = torch.randn_like(x)

        def run_b(config=None):
            return k.rms_norm_bwd(dy, x, w, rstd, None, 0.0, "normed", True, config)
        base = bench(run_b)
        best = (base, "heuristic")
        for block_m in (1, 2, 4, 8, 16, 32):
            if block_m * block_n > 16384 or block_m > m:
                continue
            for warps in (4, 8, 16):
                for per_sm in (1, 2, 4):
                    try:
                        t = bench(lambda: run_b((block_m, warps, per_sm)), rep_ms=40)
                    except Exception:
                        continue
                    if t < best[0]:
                        best = (t, f"BLOCK_M={block_m} warps={warps} per_sm={per_sm}")
        rows.append([f"rms bwd {m}x{n}", f"{base:.1f}", f"{best[0]:.1f}", best[1],
                     f"{100 * 3 * m * n * 2 / (best[0] * 1e-6) / bw:.0f}%"])
    print_table("kernel configs (us)", ["shape", "heuristic", "best", "best config", "% copy"], rows)


if __name__ == "__main__":
    main()
