"""Sweep the launch configs of the RMSNorm (or LayerNorm) kernels and compare them with the built-in heuristic.

    python benchmarks/tune_norms.py [--only 16384x4096] [--layer-norm [--fwd-only]]

Prints, per shape, the heuristic's time and the best (BLOCK_M, num_warps[, programs per SM]) found, in
microseconds (CUDA-graph replays). Used to set the heuristics in mojo_compile/kernels/rms_norm.py and
kernels/layer_norm.py (--layer-norm: the LayerNorm kernels with weight and bias, at LN_SHAPES or --only).
"""
from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import bench, copy_bandwidth, print_table  # noqa: E402

from mojo_compile.kernels import layer_norm as ln  # noqa: E402
from mojo_compile.kernels import rms_norm as k  # noqa: E402

SHAPES = [(m, n) for n in (2048, 4096, 8192) for m in (1, 128, 4096, 16384)] + [(16384 * 8, 128)]
if "--only" in sys.argv:  # e.g. --only 4096x8192,16384x8192
    SHAPES = [tuple(int(v) for v in s.split("x")) for s in sys.argv[sys.argv.index("--only") + 1].split(",")]
BWD_SHAPES = [(16384, 2048), (16384, 4096), (4096, 8192), (16384 * 8, 128)]
LN_SHAPES = [(16384, 2048), (16384, 2560), (16384, 4096), (16384, 8192)]


def best_of(run, configs, base, rep_ms):
    """(time, config) of the fastest config that launches; (base, "heuristic") if none beats the heuristic."""
    best = (base, "heuristic")
    for config in configs:
        try:
            t = bench(lambda: run(config), rep_ms=rep_ms)
        except Exception:
            continue
        if t < best[0]:
            best = (t, config)
    return best


def sweep_layer_norm(bw):
    """LayerNorm and add + LayerNorm forward and backward (BLOCK_M, num_warps, programs per SM, NUM_STAGES), weight
    and bias in bf16, at LN_SHAPES or --only (--fwd-only: no backward); % of copy bandwidth for the bytes floor
    (forward x[, residual], y[, sum]; backward x, dy, dx). Ends with the tables for kernels/layer_norm.py."""
    rows, fwd_tuned, bwd_tuned = [], {}, {}
    for m, n in (SHAPES if "--only" in sys.argv else LN_SHAPES):
        x, r = torch.randn(m, n, device="cuda", dtype=torch.bfloat16), torch.randn(m, n, device="cuda",
                                                                               dtype=torch.bfloat16)
        w, b = torch.randn(n, device="cuda", dtype=torch.bfloat16), torch.randn(n, device="cuda", dtype=torch.bfloat16)
        block_n = 1 << (n - 1).bit_length()
        fits = [bm for bm in (1, 2, 4, 8, 16, 32) if bm * block_n <= 16384 and bm <= m]
        # one program per block (programs per SM 0), or a persistent grid with its loads pipelined NUM_STAGES deep
        fwd_configs = [(bm, warps, 0, 1) for bm in fits for warps in (2, 4, 8, 16, 32) if warps * 32 <= bm * block_n]
        fwd_configs += [(bm, warps, per_sm, stages) for bm in fits[:2] for warps in (4, 8, 16) for per_sm in (1, 2, 4)
                        for stages in (2, 3) if warps * 32 <= bm * block_n]
        for residual in (False, True):
            def fwd(config=None):
                if residual:
                    return ln.add_layer_norm_fwd(x, r, w, b, 1e-5, config)
                return ln.layer_norm_fwd(x, w, b, 1e-5, config)
            t, config = best_of(fwd, fwd_configs, bench(fwd), 25)
            best = ln._fwd_config(n, residual, m, torch.cuda.get_device_properties(0).multi_processor_count) \
                if config == "heuristic" else config
            fwd_tuned.setdefault(block_n, {})[residual] = best
            rows.append([f"{'add_' if residual else ''}ln fwd {m}x{n}", f"{bench(fwd):.1f}", f"{t:.1f}", str(config),
                         f"{100 * (4 if residual else 2) * m * n * 2 / (t * 1e-6) / bw:.0f}%"])
        if "--fwd-only" in sys.argv:
            continue
        _, mean, rstd = ln.layer_norm_fwd(x, w, b, 1e-5)
        dy = torch.randn_like(x)
        for dres in (None, r):
            def bwd(config=None):
                return ln.layer_norm_bwd(dy, x, w, mean, rstd, True, True, config, grad_residual=dres)
            configs = [(bm, warps, per_sm, stages) for bm in fits if bm * block_n <= 8192 or bm == 1
                       for warps in (4, 8, 16) for per_sm in (1, 2, 4) for stages in (1, 2, 3)]
            t, config = best_of(bwd, configs, bench(bwd), 40)
            if dres is None:
                bwd_tuned[block_n] = ln._bwd_config(n) if config == "heuristic" else config
            rows.append([f"ln bwd {m}x{n}{' dres' if dres is not None else ''}", f"{bench(bwd):.1f}", f"{t:.1f}",
                         str(config), f"{100 * (4 if dres is not None else 3) * m * n * 2 / (t * 1e-6) / bw:.0f}%"])
    print_table("LayerNorm kernel configs (us)", ["shape", "heuristic", "best", "best config", "% copy"], rows)
    print("_FWD_TUNED =", {bn: (c[False], c[True]) for bn, c in fwd_tuned.items()})
    if bwd_tuned:
        print("_BWD_TUNED =", bwd_tuned)


def main():
    bw = copy_bandwidth()
    if "--layer-norm" in sys.argv:
        return sweep_layer_norm(bw)
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
