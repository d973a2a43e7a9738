"""RMSNorm spellings -> `mojo::rms_norm` (and, with a residual add in front, `mojo::add_rms_norm`).

Each spelling below is the Python a model family writes (docs/hf-spellings.md, groups N1-N5),
with the numerics the Mojo op must reproduce: where the cast back to the input dtype happens ("normed" before the
weight multiply, "output" at the end, "rstd" on the inverse root) and the weight offset (Gemma's 1 + w). Each is
registered for both ways of writing the inverse root and for bf16 / fp32 / bf16-with-fp32-weight inputs (the
casts an fp32 graph lacks make it a different graph). `.type_as(x)` and `.float()` need no spelling of their own:
canonicalisation turns them into `.to(dtype)`, and `x * x` / `x.square()` into `x.pow(2)`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..kernels.common import FLOAT_DTYPES
from . import (match_value, refuse, register_pattern, symbolic_scalar, weight_only_grad_reason,
               with_signature)

aten = torch.ops.aten
mojo = torch.ops.mojo

EPS = 1.2345e-5  # trace values of the captured scalars: unlike any other literal in these patterns
OFFSET = 3.125
TELL_TALES = (aten.rsqrt.default, aten.rms_norm.default)


# ------------------------------------------------------------------------------------------- the shared core
def rstd_rsqrt(x32, eps):
    return torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)


def rstd_pow(x32, eps):  # Gemma3n / Gemma4: torch.pow(ms, -0.5)
    return torch.pow(x32.pow(2).mean(-1, keepdim=True) + eps, -0.5)


# ----------------------------------------------------------------------- spellings: (x, weight, eps, rstd) -> y
def llama(x, weight, eps, rstd):  # N1: cast, then weight on the left
    x32 = x.to(torch.float32)
    return weight * (x32 * rstd(x32, eps)).to(x.dtype)


def llama4(x, weight, eps, rstd):  # N4: cast, then weight on the right
    x32 = x.to(torch.float32)
    return (x32 * rstd(x32, eps)).to(x.dtype) * weight


def olmo2(x, weight, eps, rstd):  # N3: weight multiply in fp32 (type promotion), then cast
    x32 = x.to(torch.float32)
    return (weight * (x32 * rstd(x32, eps))).to(x.dtype)


def olmo2_weight_right(x, weight, eps, rstd):
    x32 = x.to(torch.float32)
    return ((x32 * rstd(x32, eps)) * weight).to(x.dtype)


def helium(x, weight, eps, rstd):  # N3b: explicit fp32 weight on the left
    x32 = x.to(torch.float32)
    return (weight.to(torch.float32) * (x32 * rstd(x32, eps))).to(x.dtype)


def gemma3n(x, weight, eps, rstd):  # N2b with scale: fp32 weight on the right
    x32 = x.to(torch.float32)
    return ((x32 * rstd(x32, eps)) * weight.to(torch.float32)).to(x.dtype)


def gemma(x, weight, eps, offset, rstd):  # N2: zero-centred weight, (1 + w) in fp32
    x32 = x.to(torch.float32)
    return ((x32 * rstd(x32, eps)) * (offset + weight.to(torch.float32))).to(x.dtype)


def unweighted(x, eps, rstd):  # N2b without scale, Llama4 L2Norm, NanoChat
    x32 = x.to(torch.float32)
    return (x32 * rstd(x32, eps)).to(x.dtype)


def deepseek_v4(x, eps, rstd):  # N4 UnweightedRMSNorm: the inverse root is cast, the product is in x's dtype
    return x * rstd(x.to(torch.float32), eps).to(x.dtype)


# name -> (spelling, cast mode, has weight, has offset)
SPELLINGS = {
    "llama": (llama, "normed", True, False),
    "llama4": (llama4, "normed", True, False),
    "olmo2": (olmo2, "output", True, False),
    "olmo2_weight_right": (olmo2_weight_right, "output", True, False),
    "helium": (helium, "output", True, False),
    "gemma3n": (gemma3n, "output", True, False),
    "gemma": (gemma, "output", True, True),
    "unweighted": (unweighted, "output", False, False),
    "deepseek_v4": (deepseek_v4, "rstd", False, False),
}
RSTD_SPELLINGS = {"rsqrt": rstd_rsqrt, "pow": rstd_pow}


# ------------------------------------------------------------------------------------------------------ checks
def _norm_check(match) -> bool:
    """The op computes what the pattern did only for a float input, a captured eps and a per-column weight."""
    x = match_value(match, "x")
    if x is None:
        return refuse("x has no tensor value")
    if x.dtype not in FLOAT_DTYPES or x.dim() == 0:  # (the op normalises in fp32: an fp64 x would lose digits)
        return refuse(f"x is a {x.dtype} {x.dim()}-D tensor, not a bf16 / fp16 / fp32 tensor with columns")
    if symbolic_scalar(match, "eps") or symbolic_scalar(match, "offset"):
        # torch.compile(dynamic=True) turns float attributes into graph inputs: eps is not a constant
        return refuse("eps / offset is a graph input (dynamic=True), not a constant")
    if "weight" in match.kwargs:
        w = match_value(match, "weight")
        if w is None:
            return refuse("weight has no tensor value")
        if w.dim() != 1 or w.shape[0] != x.shape[-1]:
            return refuse(f"weight of shape {list(w.shape)} is not one value per column of x {list(x.shape)}")
        if w.dtype not in FLOAT_DTYPES:  # (an fp64 weight multiplies in fp64 in eager, in fp32 in the op)
            return refuse(f"weight is {w.dtype}, not bf16 / fp16 / fp32")
    if "residual" in match.kwargs:
        r = match_value(match, "residual")
        if r is None:
            return refuse("residual has no tensor value")
        if r.shape != x.shape or r.dtype != x.dtype:
            return refuse(f"residual {r.dtype}{list(r.shape)} differs from x {x.dtype}{list(x.shape)} "
                          f"(a broadcast or promoting add)")
        why = weight_only_grad_reason(match, ("x", "residual"), ("weight",))
        if why:
            return refuse(why)
    return True


# ------------------------------------------------------------------------------------------------ registration
def _examples(weighted: bool, residual: bool) -> list[tuple]:
    out = []
    for x_dtype, w_dtype in ((torch.bfloat16, torch.bfloat16), (torch.float32, torch.float32),
                             (torch.bfloat16, torch.float32)):
        if not weighted and w_dtype != x_dtype:
            continue
        x = torch.randn(2, 3, 8, dtype=x_dtype)
        inputs = (x, torch.randn(2, 3, 8, dtype=x_dtype)) if residual else (x,)
        out.append(inputs + ((torch.randn(8, dtype=w_dtype),) if weighted else ()))
    return out


def _make(spelling, rstd, cast, weighted, offset, residual):
    """The search and replace functions of one spelling, optionally behind a residual add."""
    params = ["x", *(["residual"] if residual else []), *(["weight"] if weighted else []), "eps",
              *(["offset"] if offset else [])]

    def bind(args):
        a = dict(zip(params, args))
        return a["x"], a.get("residual"), a.get("weight"), a["eps"], a.get("offset", 0.0)

    def search(*args):
        x, res, weight, eps, offset_value = bind(args)
        total = x + res if residual else x
        y = spelling(total, *([weight] if weighted else []), eps, *([offset_value] if offset else []), rstd)
        return (y, total) if residual else y

    def replace(*args):
        x, res, weight, eps, offset_value = bind(args)
        if residual:
            y, total, _ = mojo.add_rms_norm(x, res, weight, eps, offset_value, cast)
            return y, total
        return mojo.rms_norm(x, weight, eps, offset_value, cast)[0]

    return with_signature(search, params), with_signature(replace, params)


def register_spellings(residual: bool) -> None:
    family = "add_rms_norm" if residual else "rms_norm"
    for name, (spelling, cast, weighted, offset) in SPELLINGS.items():
        for rstd_name, rstd in RSTD_SPELLINGS.items():
            search, replace = _make(spelling, rstd, cast, weighted, offset, residual)
            scalars = {"eps": EPS, **({"offset": OFFSET} if offset else {})}
            register_pattern(f"{family}.{name}" + ("" if rstd_name == "rsqrt" else f".{rstd_name}"),
                             search, replace, _examples(weighted, residual), scalars=scalars,
                             extra_check=_norm_check, priority=10 if residual else 0, family=family,
                             tell_tales=TELL_TALES, lazy=True)


register_spellings(residual=False)


# F.rms_norm / torch.nn.RMSNorm arrive as one aten.rms_norm node: "output" numerics. eps None never reaches these
# patterns: canonicalisation writes out ATen's default (the epsilon of the computation type, fp32's for bf16 / fp16).
def _f_rms_norm_weighted_check(match) -> bool:
    """As any norm, and the weight in x's dtype (F.rms_norm's own rule for a fused, non-promoting result)."""
    if not _norm_check(match):
        return False
    w, x = match_value(match, "weight"), match_value(match, "x")
    if w.dtype != x.dtype:
        return refuse(f"weight is {w.dtype} and x {x.dtype}: F.rms_norm then promotes")
    return True


register_pattern(
    "rms_norm.F_rms_norm",
    lambda x, weight, eps: F.rms_norm(x, (x.shape[-1],), weight, eps),
    lambda x, weight, eps: mojo.rms_norm(x, weight, eps, 0.0, "output")[0],
    _examples(weighted=True, residual=False)[:2], scalars={"eps": EPS}, extra_check=_f_rms_norm_weighted_check,
    family="rms_norm", tell_tales=TELL_TALES, lazy=True)
register_pattern(
    "rms_norm.F_rms_norm_unweighted",
    lambda x, eps: F.rms_norm(x, (x.shape[-1],), None, eps),
    lambda x, eps: mojo.rms_norm(x, None, eps, 0.0, "output")[0],
    _examples(weighted=False, residual=False), scalars={"eps": EPS}, extra_check=_norm_check,
    family="rms_norm", tell_tales=TELL_TALES, lazy=True)
