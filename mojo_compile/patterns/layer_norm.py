"""LayerNorm spellings -> `mojo::layer_norm` and `mojo::add_layer_norm` (ops/layer_norm.py).

    F.layer_norm(x, (x.shape[-1],), weight, bias, eps)     nn.LayerNorm (GPT-NeoX / Pythia, StableLM, Phi-1/2,
                                                           Starcoder2, Falcon, OPT, GPT-2, BLOOM); with a weight
                                                           and a bias, a weight alone (bias=False), or neither
                                                           (elementwise_affine=False)
    h = x + residual; F.layer_norm(h, ...) -> (normed, h)  the residual add before a norm: add_layer_norm, whose
                                                           second output is the sum wherever the model uses it
                                                           again (the next residual); at a higher priority than
                                                           the plain forms, which match its inside
    Cohere's hand-written LayerNorm (hf-spellings.md N6)   x.to(fp32); mean; variance of x - mean; (x - mean) *
                                                           rsqrt(variance + eps); weight.to(fp32) * that; .to(x's
                                                           dtype): a weight, no bias, fp32 math rounded once --
                                                           the op's contract, run in fp32 as the spelling is.

In the pre-dispatch graph F.layer_norm is one `aten.layer_norm` node; its defaults (eps 1e-5, cudnn_enable) are
written out by the canonicalisation rule registered here, so one pattern captures eps wherever the model gives or
omits it. The op is aten's on the torch target, so every dtype combination aten takes (a weight in fp32 beside bf16 x
included) computes what eager does -- for Cohere's spelling, what aten's layer norm computes, the same fp32 math
summed in another order; the ttx kernels take weight and bias in x's dtype and say so where they cannot.

Refused with a reason: a norm over more than the last dim (normalized_shape of two or more sizes is another graph:
not matched at all), x not a float tensor of the op's dtypes (bf16 / fp16 / fp32), a weight or bias that is not one
value per column (Cohere's [H, D] qk-norm weight), eps a graph input (dynamic=True); for the add, a residual of
another shape or dtype than x (a broadcast or promoting add), and autocast (eager normalises the sum in fp32 there;
the op would not).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..canonicalize import all_arguments, register_rule
from . import match_value, refuse, register_pattern, symbolic_scalar, weight_only_grad_reason

aten = torch.ops.aten
mojo = torch.ops.mojo

EPS = 1.2345e-5  # the trace value of the captured eps: unlike any other literal of the pattern
TELL_TALES = (aten.layer_norm.default,)
FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)  # the op's (fp64 stays eager's)
FORMS = {  # name: (weight, bias)
    "F_layer_norm": (True, True),
    "F_layer_norm_no_bias": (True, False),
    "F_layer_norm_no_affine": (False, False),
}


register_rule(aten.layer_norm.default, all_arguments)


def _add_check(match) -> bool:
    """As _check, and the add is x + residual of one shape and dtype, outside autocast."""
    if not _check(match):
        return False
    x, r = match_value(match, "x"), match_value(match, "residual")
    if r is None or r.shape != x.shape or r.dtype != x.dtype:
        return refuse(f"residual {getattr(r, 'dtype', None)} {list(getattr(r, 'shape', []))} differs from x "
                      f"{x.dtype} {list(x.shape)} (a broadcast or promoting add)")
    graph = match.nodes[0].graph
    if torch.is_autocast_enabled(x.device.type) or any(
            n.op == "call_function" and getattr(n.target, "__name__", "") == "_enter_autocast" for n in graph.nodes):
        return refuse("autocast: eager adds in the inputs' dtype and normalises the sum in fp32")
    why = weight_only_grad_reason(match, ("x", "residual"), ("weight", "bias"))
    return refuse(why) if why else True


def _check(match) -> bool:
    """The op computes what the matched aten.layer_norm does for a float x with columns, per-column parameters and
    a constant eps."""
    x = match_value(match, "x")
    if x is None:
        return refuse("x has no tensor value")
    if x.dtype not in FLOAT_DTYPES or x.dim() == 0:
        return refuse(f"x is a {x.dtype} {x.dim()}-D tensor, not a bf16 / fp16 / fp32 tensor with columns")
    if symbolic_scalar(match, "eps"):
        return refuse("eps is a graph input (dynamic=True), not a constant")
    for name in ("weight", "bias"):
        if name in match.kwargs:
            p = match_value(match, name)
            if p is None or p.dim() != 1 or p.shape[0] != x.shape[-1] or not p.dtype.is_floating_point:
                return refuse(f"{name} {getattr(p, 'dtype', None)} {list(getattr(p, 'shape', []))} is not one float "
                              f"per column of x {list(x.shape)}")
    return True


def _add_forms(weighted: bool, biased: bool):
    """(search, replace) of the residual add before the norm: both return (normed, sum)."""
    def outputs(out):
        return out[0], out[1]
    if weighted and biased:
        return (lambda x, residual, weight, bias, eps: _normed_sum(x + residual, weight, bias, eps),
                lambda x, residual, weight, bias, eps: outputs(mojo.add_layer_norm(x, residual, weight, bias, eps)))
    if weighted:
        return (lambda x, residual, weight, eps: _normed_sum(x + residual, weight, None, eps),
                lambda x, residual, weight, eps: outputs(mojo.add_layer_norm(x, residual, weight, None, eps)))
    return (lambda x, residual, eps: _normed_sum(x + residual, None, None, eps),
            lambda x, residual, eps: outputs(mojo.add_layer_norm(x, residual, None, None, eps)))


def _normed_sum(total, weight, bias, eps):
    return F.layer_norm(total, (total.shape[-1],), weight, bias, eps), total


def _forms(weighted: bool, biased: bool):
    if weighted and biased:
        return (lambda x, weight, bias, eps: F.layer_norm(x, (x.shape[-1],), weight, bias, eps),
                lambda x, weight, bias, eps: mojo.layer_norm(x, weight, bias, eps)[0])
    if weighted:
        return (lambda x, weight, eps: F.layer_norm(x, (x.shape[-1],), weight, None, eps),
                lambda x, weight, eps: mojo.layer_norm(x, weight, None, eps)[0])
    return (lambda x, eps: F.layer_norm(x, (x.shape[-1],), None, None, eps),
            lambda x, eps: mojo.layer_norm(x, None, None, eps)[0])


def _cohere_norm(x, weight, eps):
    """hf-spellings.md N6 (Cohere, Cohere2): the subtraction written twice, the weight cast to fp32 on the left."""
    h = x.to(torch.float32)
    mean = h.mean(-1, keepdim=True)
    variance = (h - mean).pow(2).mean(-1, keepdim=True)
    h = (h - mean) * torch.rsqrt(variance + eps)
    h = weight.to(torch.float32) * h
    return h.to(x.dtype)


def _cohere_examples() -> list[tuple]:
    """bf16 and fp32 models, and a bf16 model that keeps its norm weights in fp32 (their casts differ)."""
    return [(torch.randn(2, 3, 8, dtype=dtype), torch.randn(8, dtype=weight_dtype))
            for dtype, weight_dtype in ((torch.bfloat16, torch.bfloat16), (torch.float32, torch.float32),
                                        (torch.bfloat16, torch.float32))]


def _examples(weighted: bool, biased: bool, residual: bool = False) -> list[tuple]:
    out = []
    for dtype in (torch.bfloat16, torch.float32):
        params = [torch.randn(8, dtype=dtype) for _ in range(int(weighted) + int(biased))]
        addends = [torch.randn(2, 3, 8, dtype=dtype) for _ in range(1 + int(residual))]
        out.append((*addends, *params))
    return out


for _name, (_weighted, _biased) in FORMS.items():
    register_pattern(f"layer_norm.{_name}", *_forms(_weighted, _biased), _examples(_weighted, _biased),
                     scalars={"eps": EPS}, extra_check=_check, family="layer_norm", tell_tales=TELL_TALES,
                     lazy=True)
    register_pattern(f"add_layer_norm.{_name}", *_add_forms(_weighted, _biased),
                     _examples(_weighted, _biased, residual=True), scalars={"eps": EPS}, extra_check=_add_check,
                     priority=10, family="add_layer_norm", tell_tales=TELL_TALES, lazy=True)
# Cohere's own spelling has no aten.layer_norm to tell of an unfused site: no tell-tales. The replacement keeps the
# spelling's casts: x and the weight go up to fp32 (exactly, from any float dtype), the op computes in fp32 -- forward
# and backward, as eager's autograd does through the fp32 ops -- and the result goes back to x's dtype. (The op on
# bf16 x would be the same forward, but aten's CPU backward for bf16 keeps bf16 statistics.) The residual add before
# it stays the model's: the fp32 norm reads its rounded sum.
register_pattern("layer_norm.cohere", _cohere_norm,
                 lambda x, weight, eps: mojo.layer_norm(x.to(torch.float32), weight.to(torch.float32), None,
                                                        eps)[0].to(x.dtype),
                 _cohere_examples(), scalars={"eps": EPS}, extra_check=_check, family="layer_norm", lazy=True)
