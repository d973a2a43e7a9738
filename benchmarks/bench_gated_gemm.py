"""The gate/up projection + SwiGLU of a Qwen3-8B MLP on the GPU: cuBLAS + eager elementwise / Inductor / mojo's
gated GEMM (the activation in the GEMM epilogue), side by side, plus a small sweep of the kernel's tile configs.

    python benchmarks/bench_gated_gemm.py [--max-autotune] [--quick] [--no-sweep]

Shapes: x [M, 4096] bf16, gate/up weights [12288, 4096] each, fused [24576, 4096] (gate rows first). Columns:
  gemm only   F.linear(x, W_gu) alone: what the unfused path pays before its elementwise pass (a reference point)
  cublas+ew   g, u = F.linear(x, W_gu).chunk(2, -1); F.silu(g) * u   (the baseline of every speedup)
  hf eager    F.silu(F.linear(x, W_g)) * F.linear(x, W_u)            (the Qwen3 HF spelling: two GEMMs)
  inductor    torch.compile of the cublas+ew spelling (--max-autotune: mode="max-autotune-no-cudagraphs")
  mojo        gated_gemm_fused with the `_config` heuristic; "mojo sep" the same kernel on two separate weights
  mojo best   the fastest config of the sweep (printed per M, with the whole sweep, to bake winners into _config)
Times: medians of CUDA-graph replays (GPU time, no launch overhead), microseconds. TFLOP/s counts 2*M*K*2I (the
compute roof is ~705 on an H200); "W TB/s" is the 201 MB of weights over the time (the roof of small M, ~4.25).
Each variant is checked against cublas+ew: max abs diff and normwise relative error (a bf16 ulp is ~4e-3 relative:
differences of a few 1e-3 are rounding-order noise; a broken kernel shows ~1). A sweep config that fails to compile
(shared memory) or disagrees (rel err > 1e-2) is skipped.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F
import triton
from triton.compiler.errors import CompilationError
from triton.runtime.errors import OutOfResources

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from common import bench, print_table, rel_err

from gated_gemm import _config, gated_gemm, gated_gemm_fused

K, INTER = 4096, 12288
DEVICE = "cuda"
TOKENS = [1, 16, 128, 1024, 4096, 16384]

# (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages). Small M streams the weights (bandwidth bound: tile
# width and K depth set the bytes in flight and the program count); large M is compute bound (two 128-wide
# accumulators = one 128x256 GEMM tile; stages limited by 227 KB of shared memory).
SMALL = [(16, 64, 128, 8, 4, 4), (16, 32, 128, 8, 4, 4), (16, 128, 128, 8, 4, 3), (16, 64, 256, 8, 4, 3),
         (16, 32, 256, 8, 4, 4), (32, 64, 128, 8, 4, 4), (64, 64, 128, 8, 4, 3), (16, 64, 128, 8, 8, 4)]
LARGE = [(128, 128, 64, 8, 8, 3), (128, 128, 64, 8, 8, 4), (128, 64, 64, 8, 4, 4), (128, 64, 64, 8, 8, 4),
         (64, 128, 64, 8, 4, 4), (256, 64, 64, 8, 8, 3), (64, 64, 128, 8, 4, 3), (128, 128, 64, 16, 8, 3)]


def candidates(m):
    return SMALL if m <= 64 else LARGE


def tflops(m, us):
    return 2 * m * K * 2 * INTER / (us * 1e-6) / 1e12


def unfused(x, w):
    g, u = F.linear(x, w).chunk(2, -1)
    return F.silu(g) * u


def weight_tbs(us):
    """Weight bytes streamed per second: the roofline of small M (decode), against ~4.25 TB/s of copy bandwidth."""
    return 2 * INTER * K * 2 / (us * 1e-6) / 1e12


def measure(m, w_gu, w_g, w_u, inductor, do_sweep, sweep):
    """Times and diffs of every variant at M tokens; sweep results go into `sweep[(config, m)]`."""
    x = torch.randn(m, K, device=DEVICE, dtype=torch.bfloat16)
    ref = unfused(x, w_gu)
    variants = {
        "gemm only": lambda: F.linear(x, w_gu),
        "cublas+ew": lambda: unfused(x, w_gu),
        "hf eager": lambda: F.silu(F.linear(x, w_g)) * F.linear(x, w_u),
        "inductor": lambda: inductor(x, w_gu),
        "mojo": lambda: gated_gemm_fused(x, w_gu, "silu", True),
        "mojo sep": lambda: gated_gemm(x, w_g, w_u, "silu"),
    }
    us, diff = {}, {}
    for name, fn in variants.items():
        out = fn()
        if name not in ("gemm only", "cublas+ew"):
            diff[name] = ((out.float() - ref.float()).abs().max().item(), rel_err(out, ref))
        us[name] = bench(fn)
    heur = _config(m, INTER, K)
    best = (heur, us["mojo"], diff["mojo"])
    for cfg in candidates(m) if do_sweep else []:
        def fn(cfg=cfg):
            return gated_gemm_fused(x, w_gu, "silu", True, config=cfg)
        try:
            out = fn()
            d = ((out.float() - ref.float()).abs().max().item(), rel_err(out, ref))
            if d[1] > 1e-2:
                print(f"M={m} config {cfg}: WRONG, rel err {d[1]:.2e}")
                continue
            t = bench(fn, rep_ms=50)
        except (OutOfResources, CompilationError, RuntimeError) as e:  # e.g. too much shared memory
            print(f"M={m} config {cfg}: {type(e).__name__}: {str(e)[:120]}")
            continue
        sweep[(cfg, m)] = t
        if t < best[1]:
            best = (cfg, t, d)
    us["mojo best"], diff["mojo best"] = best[1], best[2]
    base = us["cublas+ew"]
    print(f"M={m}: mojo {us['mojo']:.1f} us, best {best[1]:.1f} us {best[0]}, cublas+ew {base:.1f} us", flush=True)
    times_row = [m, *(f"{us[n]:.1f}" for n in variants), f"{us['mojo best']:.1f}",
                 *(f"{tflops(m, us[n]):.0f}" for n in ("cublas+ew", "inductor", "mojo", "mojo best")),
                 f"{weight_tbs(us['mojo best']):.2f}",
                 *(f"{base / us[n]:.2f}x" for n in ("inductor", "mojo", "mojo best"))]
    check_row = [m, *(f"{diff[n][0]:.2e} / {diff[n][1]:.1e}" for n in diff), str(heur), str(best[0])]
    return times_row, check_row


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-autotune", action="store_true", help='Inductor with mode="max-autotune-no-cudagraphs"')
    parser.add_argument("--quick", action="store_true", help="M in {1, 4096} only")
    parser.add_argument("--no-sweep", action="store_true", help="skip the config sweep")
    args = parser.parse_args()
    for name in ("recompile_limit", "cache_size_limit"):  # one static compile per M
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 64)
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  triton {triton.__version__}")
    inductor = torch.compile(unfused, dynamic=False, mode="max-autotune-no-cudagraphs" if args.max_autotune else None)
    torch.manual_seed(0)
    w_gu = (torch.randn(2 * INTER, K, device=DEVICE) / K ** 0.5).to(torch.bfloat16)  # g, u ~ N(0, 1)
    w_g, w_u = w_gu[:INTER].clone(), w_gu[INTER:].clone()  # separately allocated, like HF's gate_proj / up_proj

    times_rows, check_rows, sweep = [], [], {}
    for m in [1, 4096] if args.quick else TOKENS:
        times_row, check_row = measure(m, w_gu, w_g, w_u, inductor, not args.no_sweep, sweep)
        times_rows.append(times_row)
        check_rows.append(check_row)

    print_table(f"gate/up + SwiGLU, K={K} I={INTER} bf16 (us; TFLOP/s; speedup vs cublas+ew)",
                ["M", "gemm only", "cublas+ew", "hf eager", "inductor", "mojo", "mojo sep", "mojo best",
                 "TF cublas+ew", "TF inductor", "TF mojo", "TF best", "W TB/s best", "x inductor", "x mojo", "x best"],
                times_rows)
    print_table("max abs diff / rel err vs cublas+ew, and configs (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, warps, stages)",
                ["M", "hf eager", "inductor", "mojo", "mojo sep", "mojo best", "heuristic", "best"], check_rows)
    if sweep:
        ms = sorted({m for _, m in sweep})
        cfgs = list(dict.fromkeys(c for c, _ in sweep))
        print_table("sweep (us; - = not run or failed)", ["config", *(f"M={m}" for m in ms)],
                    [[str(c), *(f"{sweep[(c, m)]:.1f}" if (c, m) in sweep else "-" for m in ms)] for c in cfgs])


if __name__ == "__main__":
    main()
