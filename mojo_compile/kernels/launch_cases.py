"""Every kernel launcher, forward and backward, called on model shapes: what launch-config checks run over
(tests/test_devices.py records the launches under `record_launches`; scripts/ascend_check.py compiles each one for
Ascend). Models: Llama-3-8B, Qwen3-8B (qk-norm), Qwen2-0.5B; 1, 17 and 4096 tokens; bf16 and fp32."""
from __future__ import annotations

import dataclasses
import itertools
from typing import Callable, Iterator

import torch

from . import attention, attention_decode, cross_entropy, gated_act, layer_norm, rms_norm, rope

KERNEL_MODULES = (attention, attention_decode, cross_entropy, gated_act, layer_norm, rms_norm, rope)


@dataclasses.dataclass(frozen=True)
class Model:
    name: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    qk_norm: bool = False


MODELS = (
    Model("llama3-8b", 4096, 14336, 32, 8, 128, 128256),
    Model("qwen3-8b", 4096, 12288, 32, 8, 128, 151936, qk_norm=True),
    Model("qwen2-0.5b", 896, 4864, 14, 2, 64, 151936),
)
TOKENS = (1, 17, 4096)


def cases(device="meta") -> Iterator[tuple[str, Callable[[], object]]]:
    """(case name, a call of one launcher) for every launcher over the model shapes, on tensors of `device`: on
    "meta" the launchers allocate their outputs there too, so a 4096-token vocabulary-wide case costs nothing."""
    bf16, fp32 = torch.bfloat16, torch.float32
    dtypes = (bf16, fp32)

    def t(*shape, dtype=bf16):
        return torch.empty(*shape, dtype=dtype, device=device)

    for m, tokens, dtype in itertools.product(MODELS, TOKENS, dtypes):
        n, tag = m.hidden, f"{m.name} T={tokens} {str(dtype)[6:]}"
        for residual, cast in ((False, "normed"), (True, "normed"), (True, "output"), (False, "rstd")):
            yield (f"rms_norm_fwd {tag} res={residual} {cast}",
                   lambda x=t(tokens, n, dtype=dtype), r=residual, c=cast: rms_norm.rms_norm_fwd(
                       x, t(tokens, n, dtype=dtype) if r else None, t(n, dtype=dtype), 1e-6, 0.0, c, x.dtype))
        for dres in (False, True):
            yield (f"rms_norm_bwd {tag} dres={dres}",
                   lambda d=dres: rms_norm.rms_norm_bwd(t(tokens, n, dtype=dtype), t(tokens, n, dtype=dtype),
                                                        t(n, dtype=dtype), t(tokens, dtype=fp32),
                                                        t(tokens, n, dtype=dtype) if d else None, 0.0, "normed",
                                                        True))
        yield (f"layer_norm_fwd {tag}", lambda: layer_norm.layer_norm_fwd(
            t(tokens, n, dtype=dtype), t(n, dtype=dtype), t(n, dtype=dtype), 1e-5))
        yield (f"add_layer_norm_fwd {tag}", lambda: layer_norm.add_layer_norm_fwd(
            t(tokens, n, dtype=dtype), t(tokens, n, dtype=dtype), t(n, dtype=dtype), None, 1e-5))
        for dres in (False, True):
            yield (f"layer_norm_bwd {tag} dres={dres}", lambda d=dres: layer_norm.layer_norm_bwd(
                t(tokens, n, dtype=dtype), t(tokens, n, dtype=dtype), t(n, dtype=dtype), t(tokens, dtype=fp32),
                t(tokens, dtype=fp32), True, True, grad_residual=t(tokens, n, dtype=dtype) if d else None))

        inter = m.intermediate
        for act in ("silu", "gelu_tanh", "gelu"):
            yield (f"gated_act_fwd {tag} {act}", lambda a=act: gated_act.gated_act_fwd(
                t(tokens, inter, dtype=dtype), t(tokens, inter, dtype=dtype), a))
            yield (f"gated_act_bwd {tag} {act}", lambda a=act: gated_act.gated_act_bwd(
                t(tokens, inter, dtype=dtype), t(tokens, inter, dtype=dtype), t(tokens, inter, dtype=dtype), a))
            yield (f"gated_act_fused_fwd {tag} {act}", lambda a=act: gated_act.gated_act_fused_fwd(
                t(tokens, 2 * inter, dtype=dtype), a, True))
            yield (f"gated_act_fused_bwd {tag} {act}", lambda a=act: gated_act.gated_act_fused_bwd(
                t(tokens, inter, dtype=dtype), t(tokens, 2 * inter, dtype=dtype), a, True))

        yield from _rope_cases(m, tokens, dtype, tag, t)
        yield from _attention_cases(m, tokens, dtype, tag, t, device)

        if m.name != "qwen3-8b":  # same vocabulary as qwen2
            v = m.vocab
            labels = t(tokens, dtype=torch.int64)
            yield (f"cross_entropy_fwd {tag}", lambda: cross_entropy.cross_entropy_fwd(t(tokens, v, dtype=dtype),
                                                                                       labels, -100))
            yield (f"cross_entropy_fwd {tag} smoothing", lambda: cross_entropy.cross_entropy_fwd(
                t(tokens, v, dtype=dtype), labels, -100, row_sum=t(tokens, dtype=fp32)))
            yield (f"cross_entropy_bwd {tag}", lambda: cross_entropy.cross_entropy_bwd(
                t(tokens, v, dtype=dtype), labels, t(tokens, dtype=fp32), t(tokens, dtype=fp32),
                t(tokens, dtype=fp32)))
            yield (f"cross_entropy_bwd {tag} smoothing", lambda: cross_entropy.cross_entropy_bwd(
                t(tokens, v, dtype=dtype), labels, t(tokens, dtype=fp32), t(tokens, dtype=fp32),
                t(tokens, dtype=fp32), c=t(tokens, dtype=fp32)))


def _rope_cases(m: Model, tokens: int, dtype, tag: str, t) -> Iterator[tuple[str, Callable]]:
    """Rotate-half over the whole head (HF Llama / Qwen), interleaved (GPT-J), partial rotary (half the head, as
    GLM / Phi); [B, S, H, D] as HF projects it (seq_dim 1) with fp32 cos/sin of [1, S, R]; QK-norm per head (Qwen3)
    and over all heads of a token (OLMo2)."""
    fp32 = torch.float32
    d = m.head_dim
    shape_q, shape_k = (1, tokens, m.heads, d), (1, tokens, m.kv_heads, d)
    variants = (("rotate-half", d, False), ("interleaved", d, True), ("partial", d // 2, False))
    for name, rot, interleaved in variants:
        cos, sin = t(1, tokens, rot, dtype=fp32), t(1, tokens, rot, dtype=fp32)
        yield (f"rope_fwd {tag} {name}", lambda r=rot, i=interleaved, c=cos, s=sin: rope.rope_fwd(
            t(*shape_q, dtype=dtype), t(*shape_k, dtype=dtype), c, s, r, i, 1, out_dtype=dtype))
        yield (f"rope_bwd {tag} {name}", lambda r=rot, i=interleaved, c=cos, s=sin: rope.rope_bwd(
            t(*shape_q, dtype=dtype), t(*shape_k, dtype=dtype), c, s, r, i, 1, dtype=dtype))
        if not (m.qk_norm or name != "rotate-half"):
            continue
        for together in ((False, True) if m.qk_norm else (True,)):
            widths = (m.heads * d, m.kv_heads * d) if together else (d, d)
            rstd_q = t(1, tokens, dtype=fp32) if together else t(1, tokens, m.heads, dtype=fp32)
            rstd_k = t(1, tokens, dtype=fp32) if together else t(1, tokens, m.kv_heads, dtype=fp32)
            yield (f"qk_norm_rope_fwd {tag} {name} together={together}",
                   lambda r=rot, i=interleaved, c=cos, s=sin, g=together, w=widths: rope.qk_norm_rope_fwd(
                       t(*shape_q, dtype=dtype), t(*shape_k, dtype=dtype), t(w[0], dtype=dtype),
                       t(w[1], dtype=dtype), 1e-6, "normed", c, s, r, i, 1, g, out_dtype=dtype))
            yield (f"qk_norm_rope_bwd {tag} {name} together={together}",
                   lambda r=rot, i=interleaved, c=cos, s=sin, g=together, w=widths, rq=rstd_q, rk=rstd_k:
                   rope.qk_norm_rope_bwd(
                       t(*shape_q, dtype=dtype), t(*shape_k, dtype=dtype), t(*shape_q, dtype=dtype),
                       t(*shape_k, dtype=dtype), t(w[0], dtype=dtype), t(w[1], dtype=dtype), rq, rk, "normed", c,
                       s, r, i, 1, g))


def _attention_cases(m: Model, tokens: int, dtype, tag: str, t, device):
    """Prefill (causal; sliding window; softcap; a key-padding mask) forward and backward, over a context of the
    tokens themselves; decode: one query against a 4096-key cache (tokens = the batch), plain / windowed /
    softcapped / a [B, 1, 1, Skv] bool mask over the whole cache without positions (HF generate's StaticCache step),
    with the launcher's default split count and with one split."""
    hq, hkv, d = m.heads, m.kv_heads, m.head_dim
    if tokens > 1:
        q, k, v = t(1, hq, tokens, d, dtype=dtype), t(1, hkv, tokens, d, dtype=dtype), t(1, hkv, tokens, d,
                                                                                         dtype=dtype)
        keys = torch.empty(1, 1, 1, tokens, dtype=torch.bool, device=device)
        for name, kwargs in (("causal", dict(causal=True)), ("window", dict(causal=True, window=256)),
                             ("softcap", dict(causal=True, softcap=50.0)), ("padding", dict(mask=keys))):
            yield (f"attention_fwd {tag} {name}", lambda kw=kwargs: attention.attention_fwd(q, k, v, d ** -0.5,
                                                                                            **kw))
            yield (f"attention_bwd {tag} {name}", lambda kw=kwargs: attention.attention_bwd(
                t(1, hq, tokens, d, dtype=dtype), q, k, v, t(1, hq, tokens, d, dtype=dtype),
                t(1, hq, tokens, dtype=torch.float32), d ** -0.5, **kw))
    cache = 4096
    qd = t(tokens, hq, 1, d, dtype=dtype)
    kd, vd = t(tokens, hkv, cache, d, dtype=dtype), t(tokens, hkv, cache, d, dtype=dtype)
    filled = torch.empty(tokens, 1, 1, cache, dtype=torch.bool, device=device)  # a StaticCache step's key mask
    for name, kwargs in (("causal", dict()), ("window", dict(window=256)), ("softcap", dict(softcap=50.0)),
                         ("bool mask", dict(causal=False, mask=filled))):
        for splits in (None, 1):
            yield (f"attention_decode {tag} {name} splits={splits or 'default'}",
                   lambda kw=kwargs, s=splits: attention_decode.attention_decode(qd, kd, vd, d ** -0.5,
                                                                                 num_splits=s, **kw))
