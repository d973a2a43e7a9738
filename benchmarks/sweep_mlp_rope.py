"""Launch-configuration sweep of the gated-activation, RoPE and qk-norm + RoPE kernels on the GPU, at issue 3's
target shapes (bf16): SwiGLU [16384, 11008]; RoPE and Qwen3 qk-norm + RoPE on q 32 heads, k 8 heads, 16384 tokens,
D 128. Each configuration is checked against the default's output (bit for bit; where a norm's sums may be ordered
otherwise, within one ulp), then timed in CUDA-graph replays; prints the default and the best few per kernel, in us
and TB/s of the ideal bytes.

    python benchmarks/sweep_mlp_rope.py [--only gated,rope,qk_fwd,qk_bwd]
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import bench  # noqa: E402

from mojo_compile.kernels import gated_act as act  # noqa: E402
from mojo_compile.kernels import rope  # noqa: E402

TOKENS, INTER, HQ, HK, D = 16384, 11008, 32, 8, 128
DEVICE = "cuda"  # (a CPU smoke test shrinks the shapes and interprets the kernels)


def agree(out, reference, exact):
    """Bit for bit, or -- where a norm's sums may be ordered otherwise by another tile shape -- within one ulp of
    the output dtype (a rare element whose rounding flips)."""
    if exact:
        return all(torch.equal(a, b) for a, b in zip(out, reference))
    return all(torch.allclose(a.float(), b.float(), rtol=torch.finfo(a.dtype).eps, atol=0)
               for a, b in zip(out, reference))


def sweep(name, run, configs, nbytes, exact=True):
    reference = run(None)
    results = [(bench(lambda: run(None)), "default")]
    for config in configs:
        try:
            out = run(config)
            if not agree(out, reference, exact):
                print(f"{name} {config}: differs from the default; skipped")
                continue
            results.append((bench(lambda: run(config)), config))
        except Exception as e:
            print(f"{name} {config}: {type(e).__name__}: {str(e)[:100]}")
    default = results[0][0]
    print(f"{name} default: {default:.1f} us {nbytes / default / 1e6:.2f} TB/s")
    for t, config in sorted(results, key=lambda r: r[0])[:6]:
        print(f"{name} {config}: {t:.1f} us {nbytes / t / 1e6:.2f} TB/s")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="gated,rope,qk_fwd,qk_bwd")
    only = parser.parse_args().only.split(",")
    torch.manual_seed(0)
    bf16 = dict(device=DEVICE, dtype=torch.bfloat16)
    if "gated" in only:
        g, u = torch.randn(TOKENS, INTER, **bf16), torch.randn(TOKENS, INTER, **bf16)
        configs = [(1, 1024, 4), (2, 1024, 4), (4, 512, 4), (1, 2048, 4), (1, 2048, 8), (1, 4096, 8), (2, 2048, 8)]
        sweep("gated_act fwd", lambda c: (act.gated_act_fwd(g, u, "silu", c),), configs, 3 * g.numel() * 2)
        dy = torch.randn_like(g)
        sweep("gated_act bwd", lambda c: act.gated_act_bwd(dy, g, u, "silu", c), configs, 5 * g.numel() * 2)
    q, k = torch.randn(1, HQ, TOKENS, D, **bf16), torch.randn(1, HK, TOKENS, D, **bf16)
    pos = torch.arange(TOKENS, device=DEVICE).float()[:, None] / (10000 ** (torch.arange(0, D, 2, device=DEVICE) / D))
    emb = torch.cat((pos, pos), -1)[None]
    cos, sin = emb.cos().to(torch.bfloat16), emb.sin().to(torch.bfloat16)
    qk_bytes = (HQ + HK) * TOKENS * D * 2
    # (BLOCK_T, BLOCK_H, num_warps[, PAIR_TILES]): the default takes the pair tiles here (rotate-half, R == D: the
    # halves); a False 4th field runs the general kernel for comparison.
    tiles = list(itertools.product((1, 2, 4), (8, 16, 32), (2, 4, 8)))
    tiles += [(*t, False) for t in ((1, 32, 4), (1, 16, 4), (2, 16, 4), (1, 32, 8))]
    if "rope" in only:
        sweep("rope fwd", lambda c: rope.rope_fwd(q, k, cos, sin, D, False, 2, config=c), tiles, 2 * qk_bytes)
    qs, ks = torch.randn(1, TOKENS, HQ, D, **bf16), torch.randn(1, TOKENS, HK, D, **bf16)
    qw, kw = ((1 + 0.1 * torch.randn(D, device=DEVICE)).to(torch.bfloat16) for _ in range(2))
    args = (qs, ks, qw, kw, 1e-6, "normed", cos, sin, D, False, 1)
    if "qk_fwd" in only:
        sweep("qk_norm_rope fwd", lambda c: rope.qk_norm_rope_fwd(*args, config=c), tiles, 2 * qk_bytes,
              exact=False)
    if "qk_bwd" in only:
        q_out, k_out, rq, rk = rope.qk_norm_rope_fwd(*args)
        gq, gk = torch.randn_like(q_out), torch.randn_like(k_out)
        bwd_args = (gq, gk, qs, ks, qw, kw, rq, rk, "normed", cos, sin, D, False, 1)
        configs = [(*t, steps) for t in itertools.product((1, 2), (16, 32), (4, 8)) for steps in (4, 16)]
        sweep("qk_norm_rope bwd", lambda c: rope.qk_norm_rope_bwd(*bwd_args, config=c)[:2], configs, 4 * qk_bytes,
              exact=False)


if __name__ == "__main__":
    main()
