"""The causal-LM loss on materialised logits -> `mojo::cross_entropy` (ops/cross_entropy.py).

    HF  ForCausalLMLoss   logits = logits.float(); logits = logits.view(-1, V)          (bf16 / fp16 logits; fp32
                          F.cross_entropy(logits, labels, ignore_index=-100,            logits: the cast is a no-op
                                          reduction="mean")  -- or "sum", then        and canonicalisation drops it)
                          / num_items_in_batch (left as it is: it is outside the loss)
    user code             F.cross_entropy(x, t), x [N, V] fp32 (or `x.float()` of bf16 / fp16), any reduction and
                          ignore_index

In the pre-dispatch graph: `to.dtype(logits, fp32)` -> `view(., [-1, V])` -> `cross_entropy_loss(., labels, weight,
reduction, ignore_index, label_smoothing)`, every argument written out by canonicalisation (`all_arguments`). One
pattern per reduction (the reduction is an int in the graph, checked exactly on the re-trace) and per form (with the
view from [..., V], or on [N, V] as it is), traced for bf16 logits (with the cast) and fp32 (without). ignore_index
and label_smoothing (a literal in [0, 1]: the op smooths as torch does) are captured from the graph; the class
weight is captured too, so that a site with one is matched and refused with its reason (the op models none) rather
than missed silently.

The replacement hands the op the logits before the cast: the fp32 [N, V] copy, its log-softmax and the fp32 gradient
are gone; dlogits comes back in the logits' dtype.

Refused (left to eager): a class weight, a label_smoothing that is not a literal in [0, 1], logits that are not [N,
V] where the loss reads them (cross_entropy of [B, C, d...] puts the classes at dim 1), logits other than bf16 /
fp16 / fp32 (an fp64 tensor cast down), a float target (probabilities), an integer target that is not int64 [N], a
symbolic ignore_index. A loss on another view of the logits than [N, V] (`x.view(B * T // 2, 2 * V)`: Inductor's
first match ignores the view's sizes) fails the re-trace (rows_agree) and is left to the [N, V] form. bf16 logits
without the cast (`F.cross_entropy(x_bf16, t)`: eager computes and returns the loss in bf16) do not match at all.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch.fx import Node
from torch.fx.experimental.symbolic_shapes import statically_known_true

from . import match_value, refuse, register_pattern

aten = torch.ops.aten
mojo = torch.ops.mojo

IGNORE_INDEX = -12345  # trace values of the captured scalars: unlike any other literal in these patterns
LABEL_SMOOTHING = 0.3125
REDUCTIONS = ("mean", "sum", "none")
TELL_TALES = (aten.cross_entropy_loss.default,)
LOGIT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _loss_node(match):
    for node in match.nodes:
        if isinstance(node, Node) and node.target is aten.cross_entropy_loss.default:
            return node
    return None


def _cast_reason(match, loss_input, flatten: bool):
    """Why the logits the op would get are not what the loss reads, or None. The loss must read the logits (fp32)
    or `logits.to(fp32)` (bf16 / fp16; fp64 is refused below), through the view when flatten. Inductor's first
    match binds the pattern to the graph generically (dtypes ignored) and the replacement takes that binding, while
    this check sees the re-traced match: `F.cross_entropy(x32.to(bf16), t)` first matches the cast pattern with x32
    as the logits; re-traced with fp32 logits the cast vanishes and the re-traced pattern binds the bf16 tensor, which
    passes every check -- and the op would compute the loss of x32, not of its bf16 rounding. Requiring the cast
    exactly where the logits are not fp32 makes the two bindings one node."""
    logits = match.kwargs.get("logits")
    x = loss_input
    if flatten:
        if not (isinstance(x, Node) and x.target is aten.view.default):
            return "the loss does not read a view of the logits"
        x = x.args[0]
    value = match_value(match, "logits")
    if x is logits:
        if value is not None and value.dtype == torch.float32:
            return None
        return f"the loss reads {getattr(value, 'dtype', None)} logits without the cast to fp32 (eager's loss is in " \
               "that dtype)"
    if isinstance(x, Node) and x.target is aten.to.dtype and x.args[0] is logits and len(x.args) == 2 \
            and x.args[1] == torch.float32:
        return None
    return "the loss does not read the logits or their cast to fp32"


def label_smoothing_reason(label_smoothing):
    """Why the op cannot take this label_smoothing argument, or None (shared with linear_cross_entropy.py)."""
    if not isinstance(label_smoothing, (int, float)) or isinstance(label_smoothing, bool):
        return f"label_smoothing {label_smoothing!r} is not a literal"
    if not 0 <= label_smoothing <= 1:
        return f"label_smoothing={label_smoothing!r} is outside [0, 1] (torch raises)"
    return None


def _check(match, flatten: bool = False) -> bool:
    """The op computes what the matched loss does only without a class weight, for [N, V] logits of a float dtype it
    takes, int64 labels [N], a literal ignore_index and a literal label_smoothing in [0, 1]. The arguments are read
    from the matched node itself (a torch may leave re-matched scalar literals out of match.kwargs)."""
    node = _loss_node(match)
    if node is None or len(node.args) != 6:
        return refuse("no cross_entropy_loss node with its arguments written out")
    inputs, _, weight, _, ignore_index, label_smoothing = node.args
    reason = _cast_reason(match, inputs, flatten)
    if reason:
        return refuse(reason)
    if weight is not None:
        return refuse("a class weight (the op has none)")
    reason = label_smoothing_reason(label_smoothing)
    if reason:
        return refuse(reason)
    if not isinstance(ignore_index, int) or isinstance(ignore_index, bool):
        return refuse(f"ignore_index {ignore_index!r} is not a literal int")
    x, logits, labels = (inputs.meta.get("val") if isinstance(inputs, Node) else None), \
        match_value(match, "logits"), match_value(match, "labels")
    if x is None or logits is None or labels is None:
        return refuse("logits or labels have no tensor value")
    if x.dim() != 2:
        return refuse(f"the loss reads {x.dim()}-D logits {list(x.shape)}, not [N, V] (its classes are at dim 1)")
    if logits.dtype not in LOGIT_DTYPES:
        return refuse(f"logits are {logits.dtype}, not bf16 / fp16 / fp32")
    if labels.dtype.is_floating_point:
        return refuse(f"a float target {labels.dtype} (class probabilities), not class indices")
    if labels.dtype != torch.int64:
        return refuse(f"labels are {labels.dtype}, not int64")
    if labels.dim() != 1 or not statically_known_true(labels.shape[0] == x.shape[0]):  # (no guard on sizes)
        return refuse(f"labels {list(labels.shape)} are not one per row of the logits {list(x.shape)}")
    if statically_known_true(x.shape[1] == 0):
        return refuse("logits with no classes")
    return True


def rows_agree(x, labels) -> None:
    """In a search function, after the view of the logits as [N, V] (V = the logits' last dim): raise unless the
    labels are provably one per row of that view. Inductor's first match ignores the view's sizes, so a loss on
    another view of the logits (`x.view(B * T // 2, 2 * V)`, labels [B * T // 2]) matches too; the re-trace with its
    shapes then views [B * T, V] against those labels, where cross_entropy raises a ValueError that Inductor does not
    catch (the compile failed where eager runs). With symbolic sizes (dynamic=True) the rows may be neither provably
    equal nor provably different: that is refused too, as the match's check would refuse it. A RuntimeError is a
    trace failure: no match, and the near miss says why. (Shared with linear_cross_entropy.py.)"""
    if labels.dim() != 1 or not statically_known_true(labels.shape[0] == x.shape[0]):
        raise RuntimeError(f"the loss reads another view of the logits than [N, V] = {list(x.shape)} (labels "
                           f"{list(labels.shape)})")


def _forms(reduction: str, flatten: bool):
    """search / replace of the loss over `logits` as it comes ([..., V], cast to fp32 and viewed as [N, V] when
    flatten, else [N, V] already)."""
    def search(logits, labels, weight, ignore_index, label_smoothing):
        x = logits.float()
        if flatten:
            x = x.view(-1, logits.shape[-1])
            rows_agree(x, labels)
        return F.cross_entropy(x, labels, weight=weight, ignore_index=ignore_index, reduction=reduction,
                               label_smoothing=label_smoothing)

    def replace(logits, labels, weight, ignore_index, label_smoothing):
        x = logits.reshape(-1, logits.shape[-1]) if flatten else logits
        return mojo.cross_entropy(x, labels, ignore_index, reduction, float(label_smoothing))[0]

    return search, replace


def _examples(flatten: bool) -> list[tuple]:
    shape = (2, 3, 8) if flatten else (6, 8)
    labels, weight = torch.randint(0, 8, (6,)), torch.rand(8)
    return [(torch.randn(*shape, dtype=dtype), labels, weight) for dtype in (torch.bfloat16, torch.float32)]


for _reduction in REDUCTIONS:
    for _flatten in (True, False):
        register_pattern(f"cross_entropy.{_reduction}" + ("" if _flatten else ".rows"), *_forms(_reduction, _flatten),
                         _examples(_flatten), scalars={"ignore_index": IGNORE_INDEX,
                                                       "label_smoothing": LABEL_SMOOTHING},
                         extra_check=functools.partial(_check, flatten=_flatten), family="cross_entropy",
                         tell_tales=TELL_TALES, optional=("weight",), lazy=True)
