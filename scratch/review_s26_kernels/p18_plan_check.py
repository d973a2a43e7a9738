import gpu_plan  # noqa
import torch
from mojo_compile.kernels import common, rms_norm, attention, gated_act
with common.record_launches() as rec:
    rms_norm.rms_norm_fwd(torch.randn(300, 64), None, torch.randn(64), 1e-6, 0.0, "normed", torch.float32)
    attention.attention_fwd(torch.randn(1, 2, 70, 64, dtype=torch.bfloat16), torch.randn(1, 2, 70, 64, dtype=torch.bfloat16), torch.randn(1, 2, 70, 64, dtype=torch.bfloat16), 0.1)
    gated_act.gated_act_fwd(torch.randn(5, 100), torch.randn(5, 100), "silu")
for k, g, a in rec:
    print(k.fn.__name__, g, {n: a[n] for n in ("BLOCK_M", "BLOCK_N", "INTERPRET", "PERSISTENT") if n in a})
