"""The LM head fused with the loss -> `mojo::linear_cross_entropy` (ops/linear_cross_entropy.py), where the logits
are nothing but the loss's input:

    loss = F.cross_entropy(F.linear(h, W).float().view(-1, V), t)      (or `h @ W.t()`; `W.T` and
                                                                         `W.transpose(0, 1)` canonicalise to it)

In the pre-dispatch graph: `linear(h, W)` | `matmul(h, t(W))` -> [`to.dtype(., fp32)`: bf16 / fp16 only; an fp32
`.float()` is gone after canonicalisation] -> [`view(., [-1, V])`: hidden [..., H]; on [N, H] the view is the same
shape and canonicalisation drops it] -> `cross_entropy_loss(., labels, weight, reduction, ignore_index,
label_smoothing)`. One pattern per reduction, spelling (linear / matmul with t) and form (flattened from [..., H]:
the replacement flattens hidden to [N, H]; or [N, H] as it is), traced for bf16 (with the cast) and fp32. With a
final logit softcap (Gemma2 / Gemma3: `lm_head(h) / c`, `tanh`, `* c` before the cast): one more pattern per
reduction, HF's spelling only (linear, flattened); the check requires the division and the multiplication to use
one literal c > 0. With a final logit scale, HF's spellings too: Cohere's `lm_head(h) * s` (logit_scale) and
Granite's `lm_head(h) / s` (logits_scaling), one pattern per reduction each; s a finite literal (and not 0 for the
division), the op's logit_scale / logit_divisor, applied with torch's own `*` and `/` in hidden's dtype: they
round as eager's ops do on each device.

Registered above the loss on materialised logits (patterns/cross_entropy.py, priority 0), so it wins where it
applies. It applies only where the logits -- the linear's output and its cast -- have no other user: Inductor's
matcher rejects a match whose intermediate node is read outside it (a model that also returns the logits), and the
check below says so too. There the materialised form (mojo::cross_entropy) takes the loss alone.

Refused with a reason (left to the materialised form, which refuses the loss's own reasons again): a class weight, a
label_smoothing that is not a literal in [0, 1], a symbolic ignore_index, labels not int64 [N], hidden not bf16 /
fp16 / fp32, a weight of another dtype or not [V, H], an autocast region of another dtype than hidden's (ambient, or
entered in the graph: eager's head computes the logits in autocast's dtype, the op in hidden's; `autocast_reason`),
and the cast-binding trap of patterns/cross_entropy.py (`_cast_reason`): the loss must read
`to(linear(hidden, weight), fp32)` exactly where hidden is not fp32 and the linear itself where it is, with the
linear's inputs the very nodes the replacement takes. A loss on another view of the logits than [N, V] fails the
re-trace (patterns/cross_entropy.py, rows_agree). A linear with a bias (`F.linear(h, W, b)`) does not match (a third
argument): the materialised form fuses the loss alone.
"""
from __future__ import annotations

import functools
from typing import Optional

import torch
import torch.nn.functional as F
from torch.fx import Node
from torch.fx.experimental.symbolic_shapes import statically_known_true

from . import accepted_match, autocast_reason, dtensor_reason, match_value, needs_grad, refuse, register_pattern
from .cross_entropy import (IGNORE_INDEX, LABEL_SMOOTHING, LOGIT_DTYPES, REDUCTIONS, _loss_node, label_smoothing_reason,
                            rows_agree)

aten = torch.ops.aten
mojo = torch.ops.mojo

SPELLINGS = ("linear", "matmul")
SOFTCAP = 29.5  # the softcap's trace value: distinct from the other literals of the traced pattern
LOGIT_SCALE = 0.171875  # the scale's trace value (as SOFTCAP)
SCALINGS = {"scale": aten.mul.Tensor, "divisor": aten.div.Tensor}  # Cohere's `* s`, Granite's `/ s`
PRIORITY = 2  # above cross_entropy (0)


def _head_reason(match, x, spelling: str):
    """Why `x` is not the LM head over exactly the bound hidden and weight, or None."""
    hidden, weight = match.kwargs.get("hidden"), match.kwargs.get("weight")
    if not isinstance(x, Node):
        return "the loss does not read the LM head"
    if spelling == "linear":
        if x.target is not aten.linear.default or x.args[:2] != (hidden, weight) or \
                (len(x.args) > 2 and x.args[2] is not None):
            return "the loss does not read linear(hidden, weight) without a bias"
    else:
        t = x.args[1] if x.target is aten.matmul.default and len(x.args) == 2 else None
        if x.args[0] is not hidden or not (isinstance(t, Node) and t.target is aten.t.default and
                                          t.args[0] is weight):
            return "the loss does not read matmul(hidden, weight.t())"
    return None


def _softcap_of(x):
    """(the node under `mul(tanh(div(z, c)), c)`, c), or (None, why not)."""
    if not (isinstance(x, Node) and x.target is aten.mul.Tensor and len(x.args) == 2):
        return None, "no final softcap `* c` between the head and the loss"
    tanh, c = x.args
    if not (isinstance(tanh, Node) and tanh.target is aten.tanh.default):
        return None, "the softcap does not multiply a tanh"
    div = tanh.args[0]
    if not (isinstance(div, Node) and div.target is aten.div.Tensor and len(div.args) == 2 and not div.kwargs):
        return None, "the softcap's tanh does not read `z / c`"
    if not (isinstance(c, float) and div.args[1] == c and 0 < c < float("inf")):
        return None, f"the softcap divides by {div.args[1]!r} and multiplies by {c!r}: not one finite c > 0"
    return div.args[0], c


def _scaling_of(x, scaling: str):
    """(the node under `z * s` / `z / s`, s), or (None, why not)."""
    op = SCALINGS[scaling]
    if not (isinstance(x, Node) and x.target is op and len(x.args) == 2 and not x.kwargs):
        spelled = "* s" if scaling == "scale" else "/ s"
        return None, f"no final logit {scaling} (`{spelled}`) between the head and the loss"
    s = x.args[1]
    if not (isinstance(s, (int, float)) and not isinstance(s, bool) and abs(s) < float("inf")) or \
            (scaling == "divisor" and s == 0):
        return None, f"the logit {scaling} {s!r} is not a finite literal" + (" other than 0" if scaling == "divisor"
                                                                             else "")
    return x.args[0], s


def _logits_reason(match, loss_input, flatten: bool, spelling: str, softcap: bool = False,
                   scaling: Optional[str] = None):
    """The chain from the loss back to the linear, node by node (the binding trap: patterns/cross_entropy.py,
    _cast_reason), and no other user of the logits on the way."""
    x = loss_input
    chain = []
    if flatten:
        if not (isinstance(x, Node) and x.target is aten.view.default):
            return "the loss does not read a view of the logits"
        chain.append(x)
        x = x.args[0]
    value = match_value(match, "hidden")
    if value is not None and value.dtype != torch.float32:
        if not (isinstance(x, Node) and x.target is aten.to.dtype and len(x.args) == 2
                and x.args[1] == torch.float32):
            return f"the loss reads {value.dtype} logits without the cast to fp32"
        chain.append(x)
        x = x.args[0]
    if softcap:
        under, c = _softcap_of(x)
        if under is None:
            return c
        chain += [x, x.args[0], x.args[0].args[0]]
        x = under
    if scaling:
        under, s = _scaling_of(x, scaling)
        if under is None:
            return s
        chain.append(x)
        x = under
    reason = _head_reason(match, x, spelling)
    if reason:
        return reason
    chain.append(x)
    for node in chain:  # (the matcher already rejects these; said here so that the report names it)
        if len(node.users) != 1:
            return "the logits have another user (the model returns or reads them): they are materialised anyway"
    return None


def _check(match, flatten: bool, spelling: str, softcap: bool = False, scaling: Optional[str] = None) -> bool:
    node = _loss_node(match)
    if node is None or len(node.args) != 6:
        return refuse("no cross_entropy_loss node with its arguments written out")
    inputs, _, class_weight, _, ignore_index, label_smoothing = node.args
    reason = _logits_reason(match, inputs, flatten, spelling, softcap, scaling)
    if reason:
        return refuse(reason)
    if class_weight is not None:
        return refuse("a class weight (the op has none)")
    reason = label_smoothing_reason(label_smoothing)
    if reason:
        return refuse(reason)
    if not isinstance(ignore_index, int) or isinstance(ignore_index, bool):
        return refuse(f"ignore_index {ignore_index!r} is not a literal int")
    reason = dtensor_reason(match, ("hidden", "weight", "labels"), "the fused head and loss")
    if reason:  # (a DTensor LM head: its vocabulary or hidden dim sharded by tensor parallelism)
        return refuse(reason)
    x, hidden, weight, labels = (inputs.meta.get("val") if isinstance(inputs, Node) else None), \
        match_value(match, "hidden"), match_value(match, "weight"), match_value(match, "labels")
    if x is None or hidden is None or weight is None or labels is None:
        return refuse("hidden, weight or labels have no tensor value")
    if x.dim() != 2:
        return refuse(f"the loss reads {x.dim()}-D logits {list(x.shape)}, not [N, V]")
    if hidden.dtype not in LOGIT_DTYPES:
        return refuse(f"hidden is {hidden.dtype}, not bf16 / fp16 / fp32")
    if hidden.dim() < 2 or (not flatten and hidden.dim() != 2):
        return refuse(f"hidden {list(hidden.shape)} is not [..., H]")
    if weight.dim() != 2 or weight.dtype != hidden.dtype:
        return refuse(f"weight {weight.dtype} {list(weight.shape)} is not [V, H] in hidden's dtype")
    reason = autocast_reason(match, hidden, f"eager computes the LM head's logits in that dtype, the fused op in "
                                            f"hidden's ({hidden.dtype})")
    if reason:
        return refuse(reason)
    if labels.dtype.is_floating_point:
        return refuse(f"a float target {labels.dtype} (class probabilities), not class indices")
    if labels.dtype != torch.int64:
        return refuse(f"labels are {labels.dtype}, not int64")
    if labels.dim() != 1 or not statically_known_true(labels.shape[0] == x.shape[0]):
        return refuse(f"labels {list(labels.shape)} are not one per row of the logits {list(x.shape)}")
    if statically_known_true(weight.shape[0] == 0):
        return refuse("a weight with no rows (no classes)")
    return True


def _gradients_wanted(reduction: str) -> tuple[bool, bool]:
    """Which gradients the op computes in its forward (ops/linear_cross_entropy.py): those autograd may want, of a
    scalar loss. A superset costs work, not correctness (a frozen head that needs_grad wrongly calls trainable
    computes a dweight nobody reads); a gradient left out is recomputed in the backward. None for fp16: the
    gradients of an upstream gradient of 1 would be rounded to fp16 before the scaling -- dlogits / N of a mean
    sink into fp16's subnormals (what loss scaling exists to avoid), a sum's dweight overflows where eager's,
    divided by num_items first, does not. bf16 has fp32's range."""
    match = accepted_match()
    hidden = match_value(match, "hidden") if match is not None else None
    if reduction == "none" or hidden is None or hidden.dtype == torch.float16:
        return False, False
    return needs_grad(match.kwargs.get("hidden")), needs_grad(match.kwargs.get("weight"))


def _forms(reduction: str, flatten: bool, spelling: str):
    def search(hidden, weight, labels, class_weight, ignore_index, label_smoothing):
        x = F.linear(hidden, weight) if spelling == "linear" else hidden @ weight.t()
        x = x.float()
        if flatten:
            x = x.view(-1, weight.shape[0])
            rows_agree(x, labels)
        return F.cross_entropy(x, labels, weight=class_weight, ignore_index=ignore_index, reduction=reduction,
                               label_smoothing=label_smoothing)

    def replace(hidden, weight, labels, class_weight, ignore_index, label_smoothing):
        h = hidden.reshape(-1, hidden.shape[-1]) if flatten else hidden
        hidden_grad, weight_grad = _gradients_wanted(reduction)
        return mojo.linear_cross_entropy(h, weight, labels, ignore_index, reduction, hidden_grad, weight_grad,
                                         label_smoothing=float(label_smoothing))[0]

    return search, replace


def _softcap_forms(reduction: str):
    """HF's spelling with Gemma2 / Gemma3's final logit softcap: `lm_head(h) / c`, `tanh`, `* c`, then the loss."""
    def search(hidden, weight, labels, class_weight, ignore_index, label_smoothing, softcap):
        x = torch.tanh(F.linear(hidden, weight) / softcap) * softcap
        x = x.float().view(-1, weight.shape[0])
        rows_agree(x, labels)
        return F.cross_entropy(x, labels, weight=class_weight, ignore_index=ignore_index, reduction=reduction,
                               label_smoothing=label_smoothing)

    def replace(hidden, weight, labels, class_weight, ignore_index, label_smoothing, softcap):
        hidden_grad, weight_grad = _gradients_wanted(reduction)
        return mojo.linear_cross_entropy(hidden.reshape(-1, hidden.shape[-1]), weight, labels, ignore_index,
                                         reduction, hidden_grad, weight_grad, softcap=softcap,
                                         label_smoothing=float(label_smoothing))[0]

    return search, replace


def _scaled_forms(reduction: str, scaling: str):
    """HF's spelling with a final logit scale: Cohere's `lm_head(h) * s`, Granite's `lm_head(h) / s`, then the
    loss."""
    def search(hidden, weight, labels, class_weight, ignore_index, label_smoothing, s):
        x = F.linear(hidden, weight)
        x = x * s if scaling == "scale" else x / s
        x = x.float().view(-1, weight.shape[0])
        rows_agree(x, labels)
        return F.cross_entropy(x, labels, weight=class_weight, ignore_index=ignore_index, reduction=reduction,
                               label_smoothing=label_smoothing)

    def replace(hidden, weight, labels, class_weight, ignore_index, label_smoothing, s):
        hidden_grad, weight_grad = _gradients_wanted(reduction)
        scaled = {"logit_scale": s} if scaling == "scale" else {"logit_divisor": s}
        return mojo.linear_cross_entropy(hidden.reshape(-1, hidden.shape[-1]), weight, labels, ignore_index,
                                         reduction, hidden_grad, weight_grad, **scaled,
                                         label_smoothing=float(label_smoothing))[0]

    return search, replace


def _examples(flatten: bool) -> list[tuple]:
    shape = (2, 3, 8) if flatten else (6, 8)
    labels, class_weight = torch.randint(0, 16, (6,)), torch.rand(16)
    return [(torch.randn(*shape, dtype=dtype), torch.randn(16, 8, dtype=dtype), labels, class_weight)
            for dtype in (torch.bfloat16, torch.float32)]


for _reduction in REDUCTIONS:
    for _flatten in (True, False):
        for _spelling in SPELLINGS:
            register_pattern(f"linear_cross_entropy.{_spelling}.{_reduction}" + ("" if _flatten else ".rows"),
                             *_forms(_reduction, _flatten, _spelling), _examples(_flatten),
                             scalars={"ignore_index": IGNORE_INDEX, "label_smoothing": LABEL_SMOOTHING},
                             extra_check=functools.partial(_check, flatten=_flatten, spelling=_spelling),
                             priority=PRIORITY, family="linear_cross_entropy", optional=("class_weight",), lazy=True)
    register_pattern(f"linear_cross_entropy.softcap.{_reduction}", *_softcap_forms(_reduction), _examples(True),
                     scalars={"ignore_index": IGNORE_INDEX, "label_smoothing": LABEL_SMOOTHING, "softcap": SOFTCAP},
                     extra_check=functools.partial(_check, flatten=True, spelling="linear", softcap=True),
                     priority=PRIORITY, family="linear_cross_entropy", optional=("class_weight",), lazy=True)
    for _scaling in SCALINGS:
        register_pattern(f"linear_cross_entropy.{_scaling}.{_reduction}", *_scaled_forms(_reduction, _scaling),
                         _examples(True), scalars={"ignore_index": IGNORE_INDEX, "label_smoothing": LABEL_SMOOTHING,
                                                   "s": LOGIT_SCALE},
                         extra_check=functools.partial(_check, flatten=True, spelling="linear", scaling=_scaling),
                         priority=PRIORITY, family="linear_cross_entropy", optional=("class_weight",), lazy=True)
