"""Launch-configuration sweep of the Triton attention kernels on the GPU (the numbers behind kernels/attention.py's
and attention_decode.py's defaults). Each configuration is checked against the default's output first.

    python benchmarks/sweep_attention.py [--only fwd,bwd,decode]

fwd / bwd: prefill B4 S4096 Hq32 Hkv8 D128 causal bf16; decode: B64, one query against 4096 keys (positions given).
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import bench  # noqa: E402

from mojo_compile.kernels.attention import attention_bwd, attention_fwd  # noqa: E402
from mojo_compile.kernels.attention_decode import attention_decode  # noqa: E402

B, S, HQ, HKV, D = 4, 4096, 32, 8, 128
FLOPS = 2 * 2 * B * HQ * S * S * D / 2


def sweep(name, run, configs, reference, unit):
    results = []
    for config in configs:
        try:
            out = run(config)
            diff = max((a.float() - b.float()).abs().max().item() for a, b in zip(out, reference))
            if diff > 2e-2:
                print(f"{name} {config}: differs from the default by {diff:.2e}; skipped")
                continue
            results.append((bench(lambda: run(config), cudagraph=False), config))
        except Exception as e:
            print(f"{name} {config}: {type(e).__name__}: {str(e)[:100]}")
    results.sort()
    for t, config in results[:8]:
        print(f"{name} {config}: {unit(t)}")
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="fwd,bwd,decode")
    only = parser.parse_args().only.split(",")
    torch.manual_seed(0)
    q = torch.randn(B, HQ, S, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, HKV, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    scale = D ** -0.5
    out, lse = attention_fwd(q, k, v, scale, causal=True)
    print(f"default fwd: {FLOPS / bench(lambda: attention_fwd(q, k, v, scale, causal=True), cudagraph=False) / 1e6:.0f}"
          " TFLOP/s")
    if "fwd" in only:
        configs = list(itertools.product((64, 128), (32, 64, 128), (4, 8), (2, 3)))
        sweep("fwd", lambda c: attention_fwd(q, k, v, scale, causal=True, config=c), configs, (out,),
              lambda t: f"{t / 1e3:.3f} ms {FLOPS / t / 1e6:.0f} TFLOP/s")
    if "bwd" in only:
        dout = torch.randn_like(q)
        ref = attention_bwd(dout, q, k, v, out, lse, scale, causal=True)[:3]
        print(f"default bwd: {bench(lambda: attention_bwd(dout, q, k, v, out, lse, scale, causal=True), False):.0f} us")
        configs = [(32, 64, 4, 2), (32, 64, 8, 2), (32, 64, 8, 3), (64, 64, 8, 2), (32, 128, 8, 2), (64, 128, 8, 2),
                   (64, 32, 4, 2), (16, 64, 4, 2), (32, 32, 4, 2)]
        sweep("bwd", lambda c: attention_bwd(dout, q, k, v, out, lse, scale, causal=True, config=c)[:3], configs, ref,
              lambda t: f"{t / 1e3:.3f} ms {2.5 * FLOPS / t / 1e6:.0f} TFLOP/s")
    if "decode" in only:
        batch, ctx = 64, 4096
        qd = torch.randn(batch, HQ, 1, D, device="cuda", dtype=torch.bfloat16)
        kd, vd = (torch.randn(batch, HKV, ctx, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        pos = torch.tensor([ctx - 1], device="cuda")
        kv_bytes = 2 * batch * HKV * ctx * D * 2
        ref = attention_decode(qd, kd, vd, scale, True, q_pos=pos)
        tiles = list(itertools.product((32, 64, 128), (4, 8), (2, 3, 4)))
        configs = [(splits, c) for splits in (1, 2, 4, 8) for c in tiles]
        sweep("decode", lambda c: attention_decode(qd, kd, vd, scale, True, q_pos=pos, num_splits=c[0], config=c[1]),
              configs, ref, lambda t: f"{t:.1f} us {kv_bytes / t / 1e6:.2f} TB/s")


if __name__ == "__main__":
    main()
