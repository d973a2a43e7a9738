"""Attention spellings -> `mojo::attention` (docs/hf-spellings.md, section 5).

    SDPA     F.scaled_dot_product_attention(q, k, v, attn_mask, 0.0, is_causal, scale, enable_gqa) -- after
             repeat_kv (HF under torch.compile with a materialised mask), with enable_gqa, or plain (MHA, or a
             hand-written model); with or without a mask, is_causal, an explicit or the default scale
    A1       HF eager: matmul(q, repeat_kv(k)^T) * scale (+ mask) -> softmax(fp32) -> .to(q.dtype) -> matmul(., v)
             (dropout with p = 0 or in eval mode is gone after canonicalisation)
    A2       Gemma2: the same with a logit softcap: (s / c).tanh() * c before the mask
    A3       gpt-oss: a per-head sink logit concatenated to the scores, max-subtracted, softmax, sliced off

Every spelling reads k and v before repeat_kv: the op reads each kv head once for its group of q heads.

The mask is an input of the pattern. After the rewrite, the mask analysis pass (mask_analysis.py) proves what each
op's mask is -- causal, a sliding window, key padding -- or keeps the tensor. Not covered here: Falcon's handwritten
eager path (A5), other sink spellings (flint, granite_swa).
"""
from __future__ import annotations

import functools
import logging
import math

import torch
import torch.nn.functional as F
from torch.fx.experimental.symbolic_shapes import statically_known_true

from ..kernels.common import FLOAT_DTYPES
from . import match_value, needs_grad, refuse, register_pattern, symbolic_scalar, traced_scalar, with_signature

log = logging.getLogger("mojo_compile")
aten = torch.ops.aten
mojo = torch.ops.mojo

SCALE, SOFTCAP = 0.3125, 47.25  # trace values of the captured scalars
TELL_TALES = (aten.scaled_dot_product_attention.default,)


def repeat_kv(x, n_rep):
    """HF's repeat_kv, with the repeat count computed from the shapes (so the matcher re-derives it per site)."""
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, n_rep, s, d).reshape(b, h * n_rep, s, d)


# ------------------------------------------------------------------------------------------------------- checks
def _attention_check(match, causal: bool = False, additive: bool = False) -> bool:
    """What the op computes exactly: 4-D q, k, v of one float dtype, GQA head counts, one head size for q, k and v
    (the kernels' output has q's), a constant scale and softcap, and a mask that takes no gradient.
    causal (SDPA's is_causal): torch aligns it top-left, the op bottom-right; the two agree only when there are as
    many queries as keys, so other shapes (decode's one query, a prefix cache) stay SDPA.
    additive (the eager spellings' `scores + mask`): the mask must be a float; a bool one adds 0 / 1 there."""
    q, k, v = (match_value(match, n) for n in ("q", "k", "v"))
    if any(t is None for t in (q, k, v)):
        return refuse("q, k or v has no tensor value")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return refuse(f"q, k, v are {q.dim()}-D, {k.dim()}-D, {v.dim()}-D: the op takes 4-D [B, H, S, D]")
    if not (q.dtype in FLOAT_DTYPES and q.dtype == k.dtype == v.dtype):  # (the op computes in fp32: not fp64)
        return refuse(f"q, k, v are {q.dtype}, {k.dtype}, {v.dtype}: not one bf16 / fp16 / fp32 dtype")
    if q.shape[1] % k.shape[1]:
        return refuse(f"q's {q.shape[1]} heads are not a multiple of k's {k.shape[1]}")
    if k.shape[:3] != v.shape[:3] or q.shape[0] != k.shape[0]:
        return refuse(f"q {list(q.shape)}, k {list(k.shape)}, v {list(v.shape)}: batch, heads or keys differ")
    if q.shape[-1] != k.shape[-1] or v.shape[-1] != q.shape[-1]:
        return refuse(f"head sizes differ: q {q.shape[-1]}, k {k.shape[-1]}, v {v.shape[-1]}")
    if causal and not statically_known_true(q.shape[-2] == k.shape[-2]):
        return refuse(f"is_causal with {q.shape[-2]} queries and {k.shape[-2]} keys: SDPA aligns the causal mask "
                      f"top-left, the op bottom-right (they agree only for as many queries as keys)")
    if symbolic_scalar(match, "scale") or symbolic_scalar(match, "softcap_value"):
        return refuse("scale / softcap is a graph input (dynamic=True), not a constant")
    softcap = traced_scalar(match, "softcap_value")  # (None for the patterns without one)
    if softcap is not None and not (isinstance(softcap, (int, float)) and math.isfinite(softcap) and softcap > 0):
        # (the op reads 0 as no softcap, and the kernels apply a positive one only: tanh(s / -c) * -c is the same
        # function as with c, but c * tanh(s / c) with c = 0 zeroes every score)
        return refuse(f"softcap {softcap!r} is not a finite positive constant")
    if "mask" in match.kwargs:
        mask = match_value(match, "mask")
        if mask is None:
            return refuse("the mask has no tensor value")
        if mask.dim() > 4:
            return refuse(f"the mask is {mask.dim()}-D (more than 4)")
        if needs_grad(match.kwargs["mask"]):
            # the op takes no gradient for the mask (a learnable bias stays eager's)
            return refuse("the mask needs a gradient (a learnable bias): the op gives it none")
        if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
            return refuse(f"the mask is {mask.dtype}, neither bool nor float")
        if additive and mask.dtype == torch.bool:
            return refuse("a bool mask added to the scores (adds 0 / 1, not a mask)")
        scores = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
        for m, n in zip(reversed(mask.shape), reversed(scores)):
            if not (statically_known_true(m == 1) or statically_known_true(m == n)):
                # (the eager spellings' `scores + mask` broadcasts the scores up to a larger mask: another output)
                return refuse(f"the mask {list(mask.shape)} does not broadcast to the scores {list(scores)}")
    return True


def _sinks_check(match) -> bool:
    sinks, q = match_value(match, "sinks"), match_value(match, "q")
    if not _attention_check(match, additive=True):
        return False
    if sinks is None:
        return refuse("sinks has no tensor value")
    if sinks.dim() != 1 or sinks.shape[0] != q.shape[1]:
        return refuse(f"sinks {list(sinks.shape)} is not one value per q head ({q.shape[1]})")
    return True


# ----------------------------------------------------------------------------------------------------- spellings
def _kv(k, v, q, kv_form):
    if kv_form == "repeat_kv":
        n_rep = q.shape[1] // k.shape[1]
        return repeat_kv(k, n_rep), repeat_kv(v, n_rep)
    return k, v


def _sdpa_pattern(kv_form, has_mask, is_causal, has_scale):
    gqa = {"enable_gqa": True} if kv_form == "gqa" else {}

    def search(q, k, v, mask, scale):
        ks, vs = _kv(k, v, q, kv_form)
        scale_kw = {"scale": scale} if has_scale else {}
        return F.scaled_dot_product_attention(q, ks, vs, attn_mask=mask if has_mask else None, dropout_p=0.0,
                                              is_causal=is_causal, **scale_kw, **gqa)

    def replace(q, k, v, mask, scale):
        s = scale if has_scale and scale is not None else 1.0 / math.sqrt(q.shape[-1])  # SDPA's default
        return mojo.attention(q, k, v, mask=mask if has_mask else None, q_pos=None, scale=s, causal=is_causal)[0]

    params = ["q", "k", "v", *(["mask"] if has_mask else []), *(["scale"] if has_scale else [])]
    return with_signature(search, params), with_signature(replace, params)


def _eager_pattern(kv_form, has_mask, softcap, cast):
    def search(q, k, v, mask, scale, softcap_value):
        ks, vs = _kv(k, v, q, kv_form)
        w = torch.matmul(q, ks.transpose(2, 3)) * scale
        if softcap:
            w = torch.tanh(w / softcap_value) * softcap_value
        if has_mask:
            w = w + mask
        w = F.softmax(w, dim=-1, dtype=torch.float32)
        if cast:
            w = w.to(q.dtype)
        return torch.matmul(w, vs)

    def replace(q, k, v, mask, scale, softcap_value):
        out, lse = mojo.attention(q, k, v, mask=mask if has_mask else None, q_pos=None, scale=scale, causal=False,
                                  softcap=softcap_value if softcap else 0.0)
        return _nan_where_empty(out, lse) if has_mask else out

    params = ["q", "k", "v", *(["mask"] if has_mask else []), "scale", *(["softcap_value"] if softcap else [])]
    return with_signature(search, params), with_signature(replace, params)


def _nan_where_empty(out, lse):
    """Eager's softmax of a row with every score -inf is 0/0 = NaN, where the op's contract (SDPA's) gives 0 and lse
    -inf: the eager spellings put the NaN back, on exactly those rows (an elementwise epilogue Inductor fuses into
    the output's transpose). Its gradient passes through unchanged: the op's backward gives such a row none."""
    return out + torch.where(lse.isneginf(), float("nan"), 0.0).unsqueeze(-1).to(out.dtype)


def _sinks_pattern(kv_form, has_mask):
    """gpt-oss: a per-head sink logit joins the softmax (max-subtracted, in the logits' dtype) and is dropped."""
    def search(q, k, v, mask, sinks, scale):
        ks, vs = _kv(k, v, q, kv_form)
        w = torch.matmul(q, ks.transpose(2, 3)) * scale
        if has_mask:
            w = w + mask
        s = sinks.reshape(1, -1, 1, 1).expand(q.shape[0], -1, q.shape[-2], -1)
        logits = torch.cat([w, s], dim=-1)
        logits = logits - logits.max(dim=-1, keepdim=True).values
        probs = F.softmax(logits, dim=-1, dtype=logits.dtype)
        return torch.matmul(probs[..., :-1], vs)

    def replace(q, k, v, mask, sinks, scale):
        return mojo.attention(q, k, v, mask=mask if has_mask else None, q_pos=None, scale=scale, causal=False,
                              sinks=sinks)[0]

    params = ["q", "k", "v", *(["mask"] if has_mask else []), "sinks", "scale"]
    return with_signature(search, params), with_signature(replace, params)


def _examples(kv_form, has_mask, dtypes, sinks=False):
    heads_kv = 4 if kv_form == "plain" else 2
    out = []
    for dtype in dtypes:
        q = torch.randn(2, 4, 5, 8, dtype=dtype)
        k, v = torch.randn(2, heads_kv, 5, 8, dtype=dtype), torch.randn(2, heads_kv, 5, 8, dtype=dtype)
        mask = torch.randn(2, 1, 5, 5, dtype=dtype if sinks else torch.float32)
        out.append((q, k, v, *([mask] if has_mask else []), *([torch.randn(4, dtype=dtype)] if sinks else [])))
    return out


def _register():
    for kv_form in ("repeat_kv", "gqa", "plain"):
        for has_mask, is_causal in ((True, False), (False, True), (False, False)):
            for has_scale in (True, False):
                name = f"attention.sdpa.{kv_form}" + (".mask" if has_mask else "") + (".causal" if is_causal else "") \
                    + ("" if has_scale else ".default_scale")
                register_pattern(name, *_sdpa_pattern(kv_form, has_mask, is_causal, has_scale),
                                 _examples(kv_form, has_mask, [torch.float32]),
                                 scalars={"scale": SCALE} if has_scale else {},
                                 extra_check=functools.partial(_attention_check, causal=is_causal),
                                 priority=20, family="attention", tell_tales=TELL_TALES, lazy=True)
    for kv_form in ("repeat_kv", "plain"):
        for has_mask in (True, False):
            for softcap in (False, True):
                for cast, dtype in ((True, torch.bfloat16), (False, torch.float32)):
                    name = f"attention.eager.{kv_form}" + (".mask" if has_mask else "") \
                        + (".softcap" if softcap else "") + ("" if cast else ".fp32")
                    register_pattern(name, *_eager_pattern(kv_form, has_mask, softcap, cast),
                                     _examples(kv_form, has_mask, [dtype]),
                                     scalars={"scale": SCALE, **({"softcap_value": SOFTCAP} if softcap else {})},
                                     extra_check=functools.partial(_attention_check, additive=True), priority=20,
                                     family="attention", lazy=True)
            register_pattern(f"attention.sinks.{kv_form}" + (".mask" if has_mask else ""),
                             *_sinks_pattern(kv_form, has_mask),
                             _examples(kv_form, has_mask, [torch.bfloat16, torch.float32], sinks=True),
                             scalars={"scale": SCALE}, extra_check=_sinks_check, priority=20, family="attention",
                             lazy=True)


_register()
