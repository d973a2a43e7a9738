"""Every kernel launcher, forward and backward, called on model shapes: what launch-config checks run over
(tests/test_devices.py under `record_launches` with meta tensors; scripts/ascend_check.py compiling each launch).

`cases(device, dtype)` yields (name, thunk); a thunk calls one launcher on fresh tensors of `device` (use "meta"
for the large shapes: the launchers only allocate and launch). Shapes: Llama-3-8B (hidden 4096, MLP 14336, 32 / 8
heads of 128), Qwen3's qk-norm, a small model (hidden 896, 14 / 2 heads of 64), a 128K vocabulary; 1, 17 and 16384
tokens."""
from __future__ import annotations

import sys
from typing import Callable, Iterator

import torch

from .attention import attention_bwd, attention_fwd
from .attention_decode import attention_decode
from .cross_entropy import cross_entropy_bwd, cross_entropy_fwd
from .gated_act import gated_act_bwd, gated_act_fused_bwd, gated_act_fused_fwd, gated_act_fwd
from .layer_norm import add_layer_norm_fwd, layer_norm_bwd, layer_norm_fwd
from .rms_norm import rms_norm_bwd, rms_norm_fwd
from .rope import qk_norm_rope_bwd, qk_norm_rope_fwd, rope_bwd, rope_fwd

KERNEL_MODULES = tuple(sys.modules[f"{__package__}.{name}"] for name in (
    "attention", "attention_decode", "cross_entropy", "gated_act", "layer_norm", "rms_norm", "rope"))
TOKENS = (1, 17, 16384)
HIDDEN = (896, 4096)
MLP = {896: 4864, 4096: 14336}
HEADS = {896: (14, 2, 64), 4096: (32, 8, 128)}  # q heads, kv heads, head dim
VOCAB = 128256


def cases(device, dtype=torch.bfloat16) -> Iterator[tuple[str, Callable[[], object]]]:
    def new(*shape, dt=dtype):
        return torch.empty(shape, dtype=dt, device=device)

    def stats(*shape):
        return new(*shape, dt=torch.float32)

    for t in TOKENS:
        for h in HIDDEN:
            tag = f"T{t}.H{h}"
            yield f"rms_norm_fwd.{tag}", lambda t=t, h=h: rms_norm_fwd(new(t, h), None, new(h), 1e-6, 0.0, "output",
                                                                           dtype)
            yield f"add_rms_norm_fwd.{tag}", lambda t=t, h=h: rms_norm_fwd(new(t, h), new(t, h), new(h), 1e-6, 0.0,
                                                                               "output", dtype)
            yield f"rms_norm_bwd.{tag}", lambda t=t, h=h: rms_norm_bwd(new(t, h), new(t, h), new(h), stats(t), None,
                                                                           0.0, "output", True)
            yield f"layer_norm_fwd.{tag}", lambda t=t, h=h: layer_norm_fwd(new(t, h), new(h), new(h), 1e-5)
            yield f"add_layer_norm_fwd.{tag}", lambda t=t, h=h: add_layer_norm_fwd(new(t, h), new(t, h), new(h),
                                                                                   new(h), 1e-5)
            yield f"layer_norm_bwd.{tag}", lambda t=t, h=h: layer_norm_bwd(new(t, h), new(t, h), new(h), stats(t),
                                                                           stats(t), True, True)
            i = MLP[h]
            yield f"gated_act_fwd.{tag}", lambda t=t, i=i: gated_act_fwd(new(t, i), new(t, i), "silu")
            yield f"gated_act_bwd.{tag}", lambda t=t, i=i: gated_act_bwd(new(t, i), new(t, i), new(t, i), "silu")
            yield f"gated_act_fused_fwd.{tag}", lambda t=t, i=i: gated_act_fused_fwd(new(t, 2 * i), "gelu_tanh", True)
            yield f"gated_act_fused_bwd.{tag}", lambda t=t, i=i: gated_act_fused_bwd(new(t, i), new(t, 2 * i),
                                                                                     "gelu_tanh", True)
            hq, hk, d = HEADS[h]
            for interleaved, rotary in ((False, d), (True, d), (False, d // 2)):
                rtag = f"{tag}.{'interleaved' if interleaved else 'halves'}.R{rotary}"

                def rope(backward, t=t, hq=hq, hk=hk, d=d, interleaved=interleaved, rotary=rotary):
                    fn = rope_bwd if backward else rope_fwd
                    return fn(new(1, t, hq, d), new(1, t, hk, d), new(t, rotary), new(t, rotary), rotary,
                              interleaved, 1)
                yield f"rope_fwd.{rtag}", lambda rope=rope: rope(False)
                yield f"rope_bwd.{rtag}", lambda rope=rope: rope(True)

            def qk_norm(backward, t=t, hq=hq, hk=hk, d=d):
                q, k, w = new(1, t, hq, d), new(1, t, hk, d), new(d)
                if backward:
                    return qk_norm_rope_bwd(new(1, t, hq, d), new(1, t, hk, d), q, k, w, w, stats(1, t, hq),
                                            stats(1, t, hk), "output", new(t, d), new(t, d), d, False, 1)
                return qk_norm_rope_fwd(q, k, w, w, 1e-6, "output", new(t, d), new(t, d), d, False, 1)
            yield f"qk_norm_rope_fwd.{tag}", lambda qk_norm=qk_norm: qk_norm(False)
            yield f"qk_norm_rope_bwd.{tag}", lambda qk_norm=qk_norm: qk_norm(True)
            if t > 1:
                def attention(backward, t=t, hq=hq, hk=hk, d=d):
                    q, k, v = new(1, hq, t, d), new(1, hk, t, d), new(1, hk, t, d)
                    if backward:
                        return attention_bwd(new(1, hq, t, d), q, k, v, new(1, hq, t, d), stats(1, hq, t),
                                             d ** -0.5, causal=True)
                    return attention_fwd(q, k, v, d ** -0.5, causal=True)
                yield f"attention_fwd.{tag}", lambda attention=attention: attention(False)
                yield f"attention_bwd.{tag}", lambda attention=attention: attention(True)
            yield f"attention_decode.{tag}", lambda t=t, hq=hq, hk=hk, d=d: attention_decode(
                new(4, hq, 1, d), new(4, hk, max(t, 64), d), new(4, hk, max(t, 64), d), d ** -0.5)
        yield f"cross_entropy_fwd.T{t}", lambda t=t: cross_entropy_fwd(new(t, VOCAB), new(t, dt=torch.int64), -100)
        yield f"cross_entropy_bwd.T{t}", lambda t=t: cross_entropy_bwd(new(t, VOCAB), new(t, dt=torch.int64),
                                                                       stats(t), stats(t), stats(t))
