import sys
import gpu_plan  # noqa
import torch
import p8_attn_edges as E
from mojo_compile.kernels import attention_decode as AD
print("MIN_KEYS_PER_SPLIT", AD.MIN_KEYS_PER_SPLIT, "MAX_SPLITS", AD.MAX_SPLITS)
torch.manual_seed(0)
for SQ, SK in ((1, 1000), (3, 777), (16, 1300)):
    for dt in (torch.bfloat16, torch.float32):
        q = torch.randn(1, 4, SQ, 64, dtype=dt); k = torch.randn(1, 1, SK, 64, dtype=dt); v = torch.randn(1, 1, SK, 64, dtype=dt)
        E.run(q, k, v, causal=True, sinks=torch.randn(4), tag=f"dec {SQ}x{SK} {dt} sinks")
        m = torch.zeros(1, 1, 1, SK); m[..., SK // 3:] = float("-inf")
        E.run(q, k, v, m=m.to(dt), causal=True, tag=f"dec {SQ}x{SK} {dt} add-inf tail")
        mb = torch.rand(1, 1, SQ, SK) > 0.5; mb[..., :, :SK // 2] = False
        E.run(q, k, v, m=mb, window=100, causal=True, softcap=10.0, tag=f"dec {SQ}x{SK} {dt} bool+win+sc")
print("bad", E.bad)
