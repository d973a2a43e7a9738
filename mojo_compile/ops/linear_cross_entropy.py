"""The LM head fused with the causal-LM loss as a Mojo op: `mojo::linear_cross_entropy(hidden, weight, labels,
ignore_index, reduction, hidden_grad, weight_grad, softcap, logit_scale, logit_divisor, label_smoothing)` -> (loss,
lse, dhidden, dweight), loss what `F.cross_entropy(F.linear(hidden, weight).float(), labels, ignore_index=...,
reduction=..., label_smoothing=...)` computes, without ever materialising the [N, V] logits (forward or backward).

    hidden [N, H]  bf16 / fp16 / fp32
    weight [V, H]  hidden's dtype (F.linear takes no mixed dtypes)
    labels [N]     int64; a row whose label is ignore_index is ignored
    logits         hidden @ weight.T as the spelling computes it: the GEMM in hidden's dtype (fp32 accumulation,
                   rounded to that dtype -- bf16 logits for bf16), then in that dtype, each op rounding as eager's:
                   `* logit_scale` where it is not 1 (Cohere), `/ logit_divisor` where it is not 1 (Granite's
                   logits_scaling), Gemma2's final softcap `/ softcap`, `tanh`, `* softcap` where softcap > 0;
                   then `.float()`; never stored whole
    loss, lse      as mojo::cross_entropy (ops/cross_entropy.py) on those logits, label smoothing included: fp32,
                   loss a scalar for "mean" / "sum" ("mean" over rows not ignored, NaN when every row is ignored),
                   [N] for "none"; lse [N]

Gradients in the forward (hidden_grad / weight_grad, for "mean" and "sum"): a scalar loss's gradients are its
upstream gradient g times those of g = 1, so the forward, which has each block of logits in hand, also returns
dhidden and dweight for g = 1 (the pattern asks for them where autograd will want them: patterns/
linear_cross_entropy.py). The backward then only scales them by g: three GEMMs in all, as the unfused head, where
recomputing the logits in the backward would cost a fourth. A gradient not asked for comes back as [0, H]. Not
for fp16 (the pattern does not ask): rounded to fp16 before the scaling, the gradients of g = 1 lose what eager's,
scaled first, keep (loss scaling's small dlogits; a sum's overflowing dweight).

Backward otherwise (reduction "none", a gradient of lse, or a gradient the forward did not compute): dlogits =
(softmax - onehot(labels)) * g, per block of rows and of vocabulary, recomputed from the saved hidden and weight;
dhidden [N, H] and dweight [V, H] in their dtypes. Saved between forward and backward: hidden, weight, labels, lse
and the forward's gradients -- nothing of size [N, V]. A label out of [0, V) that is not ignore_index: a NaN row (no
out-of-bounds read, no host sync), as mojo::cross_entropy.

Implementations, registered below the op (docs/adding-a-fusion.md):
  torch      blockwise over rows and vocabulary in torch ops (lowering/reference.py's row math, shared with
             mojo::cross_entropy); at most one fp32 block alive. Also what a second-order gradient differentiates.
  ttx        chunks of rows: one cuBLAS GEMM per chunk for its logits, kernels/cross_entropy.py's loss and gradient
             kernels on them, then the gradient GEMMs. Not traceable: Inductor calls the op.
  torch_npu  the torch reference, on npu tensors: no torch_npu op is mapped to it yet. Registered so that the report
             names torch_npu, not a fallback.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .. import lowering
from ..kernels.common import FLOAT_DTYPES, ttx_device_reason
from ..lowering import reference as shared
from .cross_entropy import LOGIT_DTYPES, REDUCTIONS, check_label_smoothing, check_labels


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and abs(x) < float("inf")


def _check(hidden: Tensor, weight: Tensor, labels: Tensor, reduction: str, softcap: float, logit_scale: float,
           logit_divisor: float, label_smoothing: float, target: str) -> None:
    check_label_smoothing("linear_cross_entropy", label_smoothing)
    if not (_finite(softcap) and softcap >= 0):
        raise ValueError(f"mojo linear_cross_entropy: softcap must be a finite float >= 0 (0: none), got {softcap!r}")
    if not _finite(logit_scale):
        raise ValueError(f"mojo linear_cross_entropy: logit_scale must be a finite float (1: none), got "
                         f"{logit_scale!r}")
    if not (_finite(logit_divisor) and logit_divisor != 0):
        raise ValueError(f"mojo linear_cross_entropy: logit_divisor must be a finite float other than 0 (1: none), "
                         f"got {logit_divisor!r}")
    if not isinstance(reduction, str) or reduction not in REDUCTIONS:
        raise ValueError(f"mojo linear_cross_entropy: reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if hidden.dim() != 2 or hidden.dtype not in LOGIT_DTYPES:
        raise ValueError(f"mojo linear_cross_entropy: hidden must be [N, H] bf16 / fp16 / fp32, got {hidden.dtype} "
                         f"{tuple(hidden.shape)}")
    if weight.dim() != 2 or weight.dtype != hidden.dtype or weight.shape[1] != hidden.shape[1]:
        raise ValueError(f"mojo linear_cross_entropy: weight must be [V, H] = [V, {hidden.shape[1]}] "
                         f"{hidden.dtype}, got {weight.dtype} {tuple(weight.shape)}")
    if weight.shape[0] == 0:
        raise ValueError("mojo linear_cross_entropy: weight has no rows (V = 0)")
    check_labels("linear_cross_entropy", labels, hidden.shape[0])
    lowering.check_target_name(target)


def _loss_shape(hidden: Tensor, reduction: str) -> list:
    return [hidden.shape[0]] if reduction == "none" else []


# ---------------------------------------------------------------------------------------------------------- forward
def _grad_shapes(hidden: Tensor, weight: Tensor, hidden_grad: bool, weight_grad: bool) -> tuple[list, list]:
    return ([*hidden.shape] if hidden_grad else [0, hidden.shape[1]]), \
        ([*weight.shape] if weight_grad else [0, weight.shape[1]])


@torch.library.custom_op("mojo::linear_cross_entropy", mutates_args=())
def linear_cross_entropy(hidden: Tensor, weight: Tensor, labels: Tensor, ignore_index: int = -100,
                         reduction: str = "mean", hidden_grad: bool = False, weight_grad: bool = False,
                         softcap: float = 0.0, logit_scale: float = 1.0, logit_divisor: float = 1.0,
                         label_smoothing: float = 0.0, target: str = "torch") -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(loss, lse, dhidden, dweight): loss and lse fp32 (loss a scalar for "mean" / "sum", [N] for "none"; lse
    [N]); dhidden / dweight the gradients of the loss for an upstream gradient of 1, in hidden's / weight's dtype,
    where hidden_grad / weight_grad ask for them ("mean" / "sum" only), else [0, H]."""
    _check(hidden, weight, labels, reduction, softcap, logit_scale, logit_divisor, label_smoothing, target)
    if (hidden_grad or weight_grad) and reduction == "none":
        raise ValueError("mojo linear_cross_entropy: gradients in the forward need a scalar loss (mean / sum)")
    return lowering.call("linear_cross_entropy", target, hidden, weight, labels, ignore_index, reduction,
                         hidden_grad, weight_grad, float(softcap), float(logit_scale), float(logit_divisor),
                         float(label_smoothing))


@linear_cross_entropy.register_fake
def _(hidden, weight, labels, ignore_index=-100, reduction="mean", hidden_grad=False, weight_grad=False,
      softcap=0.0, logit_scale=1.0, logit_divisor=1.0, label_smoothing=0.0, target="torch"):
    dh_shape, dw_shape = _grad_shapes(hidden, weight, hidden_grad, weight_grad)
    return (hidden.new_empty(_loss_shape(hidden, reduction), dtype=torch.float32),
            hidden.new_empty([hidden.shape[0]], dtype=torch.float32),
            hidden.new_empty(dh_shape), weight.new_empty(dw_shape))


# --------------------------------------------------------------------------------------------------------- backward
@torch.library.custom_op("mojo::linear_cross_entropy_backward", mutates_args=())
def linear_cross_entropy_backward(grad_loss: Tensor, grad_lse: Optional[Tensor], hidden: Tensor, weight: Tensor,
                                  labels: Tensor, lse: Tensor, ignore_index: int, reduction: str, hidden_grad: bool,
                                  weight_grad: bool, softcap: float, logit_scale: float, logit_divisor: float,
                                  label_smoothing: float, target: str) -> tuple[Tensor, Tensor]:
    """(dhidden [N, H], dweight [V, H]) in their dtypes; one not asked for (hidden_grad / weight_grad False) is
    returned as zeros of size 0 along its first dim -- never computed."""
    _check(hidden, weight, labels, reduction, softcap, logit_scale, logit_divisor, label_smoothing, target)
    return lowering.call("linear_cross_entropy_backward", target, grad_loss, grad_lse, hidden, weight, labels, lse,
                         ignore_index, reduction, hidden_grad, weight_grad, float(softcap), float(logit_scale),
                         float(logit_divisor), float(label_smoothing))


@linear_cross_entropy_backward.register_fake
def _(grad_loss, grad_lse, hidden, weight, labels, lse, ignore_index, reduction, hidden_grad, weight_grad, softcap,
      logit_scale, logit_divisor, label_smoothing, target):
    dh_shape, dw_shape = _grad_shapes(hidden, weight, hidden_grad, weight_grad)
    return hidden.new_empty(dh_shape), weight.new_empty(dw_shape)


# --------------------------------------------------------------------------------------------------------- autograd
def _setup(ctx, inputs, output):
    hidden, weight, labels, ignore_index, reduction, hidden_grad, weight_grad, softcap, logit_scale, logit_divisor, \
        label_smoothing, target = inputs
    _, lse, dh_unit, dw_unit = output
    ctx.save_for_backward(hidden, weight, labels, lse, dh_unit, dw_unit)  # nothing [N, V]
    ctx.mark_non_differentiable(dh_unit, dw_unit)  # what the backward scales, not results to differentiate
    ctx.set_materialize_grads(False)  # an output nobody differentiates: None, not zeros (lse: the scaled path)
    ctx.params = (ignore_index, reduction)
    ctx.logit_ops = (softcap, logit_scale, logit_divisor)  # what turns the GEMM's output into the logits
    ctx.label_smoothing = label_smoothing
    ctx.unit_grads = (hidden_grad, weight_grad)
    ctx.target = target


def _backward(ctx, grad_loss, grad_lse, _grad_dh_unit, _grad_dw_unit):
    """The forward's gradients scaled by grad_loss where it computed them and lse has no gradient; the rest
    recomputed blockwise. Under create_graph=True (grad mode on in the backward: eager autograd; AOTAutograd traces
    backwards without it), gradients that are differentiable themselves: see _differentiable_backward."""
    if torch.is_grad_enabled():
        return _differentiable_backward(ctx, grad_loss, grad_lse)
    hidden, weight, labels, lse, dh_unit, dw_unit = ctx.saved_tensors
    want_h, want_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    if grad_loss is None:
        grad_loss = lse.new_zeros(_loss_shape(hidden, ctx.params[1]))
    scaled = grad_lse is None
    have_h, have_w = scaled and ctx.unit_grads[0], scaled and ctx.unit_grads[1]
    dh = dh_unit * grad_loss if want_h and have_h else None
    dw = dw_unit * grad_loss if want_w and have_w else None
    rest_h, rest_w = want_h and not have_h, want_w and not have_w
    if rest_h or rest_w:
        rh, rw = linear_cross_entropy_backward(grad_loss, grad_lse, hidden, weight, labels, lse, *ctx.params,
                                               rest_h, rest_w, *ctx.logit_ops, ctx.label_smoothing, ctx.target)
        dh, dw = (rh if rest_h else dh), (rw if rest_w else dw)
    return dh, dw, *[None] * 10


def _differentiable_backward(ctx, grad_loss, grad_lse):
    """The gradients through the torch reference's blockwise loss (reference_loss below), differentiated by
    autograd with create_graph: a second-order gradient through the loss is eager's, at the reference's speed and
    memory (autograd keeps every block). The scaled forward gradients would drop the terms through them."""
    hidden, weight, labels = ctx.saved_tensors[:3]
    # (each input through its own alias: with a weight computed from the hidden, F.linear(h, h) as contrastive losses
    # spell it, autograd.grad at the saved tensors took the total derivative, not the op's partial one)
    dh, dw = shared.differentiable_grads(
        lambda h, w: reference_loss(h, w, labels, *ctx.params, *ctx.logit_ops, ctx.label_smoothing),
        (hidden, weight), ctx.needs_input_grad[:2], (grad_loss, grad_lse))
    return dh, dw, *[None] * 10


linear_cross_entropy.register_autograd(_backward, setup_context=_setup)

for _op, _name in ((linear_cross_entropy, "linear_cross_entropy"),
                   (linear_cross_entropy_backward, "linear_cross_entropy_backward")):
    lowering.inline_in_inner_compiler(_op, _name)


# ------------------------------------------------------------------------------------------------ target: torch
LCE_BLOCKS = None  # (rows, vocabulary columns) per block; None: LCE_ROWS rows, columns to fill
#                    lowering/reference.py's CHUNK_ELEMENTS
LCE_ROWS = 4096


def _lce_blocks(hidden, weight):
    """(row chunks of [0, N), column blocks of [0, V)) as (start, size) lists. One chunk along a symbolic size."""
    n, v = hidden.shape[0], weight.shape[0]
    rows, cols = LCE_BLOCKS or (LCE_ROWS, None)
    if cols is None:
        cols = max(1, shared.CHUNK_ELEMENTS // rows)

    def spans(size, block):
        if not isinstance(size, int):
            return [(0, size)]
        return [(s, min(block, size - s)) for s in range(0, size, block)] or [(0, 0)]
    return spans(n, rows), spans(v, cols)


def _lce_scaled(raw, logit_scale: float, logit_divisor: float):
    """The GEMM's output times logit_scale, then divided by logit_divisor, where they are not 1: eager's ops in
    hidden's dtype, each rounding once."""
    if logit_scale != 1:
        raw = raw * logit_scale
    if logit_divisor != 1:
        raw = raw / logit_divisor
    return raw


def _lce_logits(raw, softcap: float, logit_scale: float = 1.0, logit_divisor: float = 1.0):
    """A block of the logits from its GEMM output `raw` = `F.linear(h, w)` in hidden's dtype (the GEMM accumulates
    in fp32 and rounds once to bf16 / fp16; only its K-split may differ from the full [N, V] product's), rounded as
    the spelling rounds them: the scale and divisor (_lce_scaled), a final softcap (Gemma2's `z / c`, `tanh`, `* c`,
    each rounded to that dtype as eager's ops round), then `.float()`."""
    z = _lce_scaled(raw, logit_scale, logit_divisor)
    return (torch.tanh(z / softcap) * softcap if softcap else z).float()


def _lce_dlogits(d, raw, softcap: float, logit_scale: float = 1.0, logit_divisor: float = 1.0):
    """The gradient at the GEMM's output from the fp32 gradient d of the block's logits, rounded as eager's backward
    rounds it: `.float()`'s backward rounds d to hidden's dtype; a softcap's `* c`, `tanh` and `/ c` backwards, then
    the divisor's and the scale's, each round again."""
    d = d.to(raw.dtype)
    if softcap:
        z = _lce_scaled(raw, logit_scale, logit_divisor)
        d = torch.ops.aten.tanh_backward(d * softcap, torch.tanh(z / softcap)) / softcap
    if logit_divisor != 1:
        d = d / logit_divisor
    if logit_scale != 1:
        d = d * logit_scale
    return d


def reference(hidden, weight, labels, ignore_index, reduction, hidden_grad, weight_grad, softcap, logit_scale=1.0,
              logit_divisor=1.0, label_smoothing=0.0):
    """Blockwise over rows and vocabulary: per block the logits (_lce_logits), lse merged by logaddexp (online
    logsumexp; -inf with -inf stays -inf, NaN propagates, +inf gives NaN as eager's), the label's logit picked
    from the block holding it. At most one [rows, cols] fp32 block alive; nothing [N, V]. The gradients for an
    upstream gradient of 1, where asked for, by the backward below (a second pass: this is the reference, not
    the fast path)."""
    logit_ops = (softcap, logit_scale, logit_divisor)
    loss, lse = reference_loss(hidden, weight, labels, ignore_index, reduction, *logit_ops, label_smoothing)
    dh, dw = reference_backward(torch.ones_like(loss), None, hidden, weight, labels, lse, ignore_index, reduction,
                                hidden_grad, weight_grad, *logit_ops, label_smoothing)
    return loss, lse, dh, dw


def reference_loss(hidden, weight, labels, ignore_index, reduction, softcap, logit_scale=1.0, logit_divisor=1.0,
                   label_smoothing=0.0):
    """(loss, lse) blockwise in torch ops, differentiable (the ops' backward of a second order uses it)."""
    row_spans, col_spans = _lce_blocks(hidden, weight)
    v = weight.shape[0]
    ignored, bad = shared.cross_entropy_rows(labels, ignore_index, v)
    lses, picks, sums = [], [], []
    for r0, nr in row_spans:
        h, t = hidden.narrow(0, r0, nr), labels.narrow(0, r0, nr)
        lse = torch.full_like(t, float("-inf"), dtype=torch.float32)
        picked = torch.zeros_like(t, dtype=torch.float32)
        row_sum = torch.zeros_like(t, dtype=torch.float32)
        for c0, nc in col_spans:
            z = _lce_logits(h @ weight.narrow(0, c0, nc).t(), softcap, logit_scale, logit_divisor)
            lse = torch.logaddexp(lse, torch.logsumexp(z, dim=-1))
            if label_smoothing:
                row_sum = row_sum + z.sum(-1)
            idx = t - c0
            inside = (idx >= 0) & (idx < nc)
            picked = picked + torch.where(inside, z.gather(1, idx.clamp(0, nc - 1).unsqueeze(1)).squeeze(1), 0.0)
        lses.append(lse)
        picks.append(picked)
        sums.append(row_sum)
    lse, picked, row_sum = (torch.cat(lses), torch.cat(picks), torch.cat(sums)) if len(lses) > 1 else \
        (lses[0], picks[0], sums[0])
    lse = shared.lse_as_log_softmax(lse)
    row = torch.where(ignored, 0.0, torch.where(bad, float("nan"), lse - picked))
    row = shared.cross_entropy_smoothed(row, lse, row_sum, labels, ignore_index, v, label_smoothing)
    return shared.cross_entropy_reduce(row, labels, ignore_index, reduction), lse


def reference_backward(grad_loss, grad_lse, hidden, weight, labels, lse, ignore_index, reduction, hidden_grad,
                       weight_grad, softcap, logit_scale=1.0, logit_divisor=1.0, label_smoothing=0.0):
    """Recomputes each block of logits; dlogits_block = (softmax - onehot) * g in fp32, deterministic (fixed
    loop order, plain GEMMs, no atomics). Rounding, against the spelling's backward (fp32 dlogits, cast back to
    hidden's dtype by `.float()`'s backward, then F.linear's backward, GEMMs in that dtype):
      - dlogits_block is rounded to hidden's dtype before the GEMMs, as the cast's backward rounds dlogits;
      - dhidden += dlogits_block @ W_block and dW_block += dlogits_block.T @ hidden_rows are GEMMs in hidden's
        dtype (fp32 accumulation inside), each block's partial product rounded to that dtype by the GEMM and summed
        over blocks in fp32; the sums are rounded once to the dtype at the end. Eager rounds each full GEMM once:
        ours adds one rounding per vocabulary block (dhidden) / row chunk (dweight) of the partial sums -- exact for
        fp32, within the tests' "as accurate as eager" bound for bf16. (A GEMM with an fp32 output from bf16 inputs,
        `torch.mm(out_dtype=)`, would remove it where the device has one: CUDA, not the CPU.)"""
    row_spans, col_spans = _lce_blocks(hidden, weight)
    v, dtype = weight.shape[0], hidden.dtype
    if not (hidden_grad or weight_grad):
        return hidden.new_zeros((0, hidden.shape[1])), weight.new_zeros((0, weight.shape[1]))
    a, b, c = shared.cross_entropy_row_grads(grad_loss, grad_lse, labels, ignore_index, reduction, v, label_smoothing)
    dh = torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device) if hidden_grad else None
    dw = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if weight_grad else None
    for c0, nc in col_spans:
        w = weight.narrow(0, c0, nc)
        cols = torch.arange(c0, c0 + nc, device=hidden.device)
        for r0, nr in row_spans:
            h = hidden.narrow(0, r0, nr)
            t, s = labels.narrow(0, r0, nr), lse.narrow(0, r0, nr)
            a_rows, b_rows = a.narrow(0, r0, nr), b.narrow(0, r0, nr)
            raw = h @ w.t()
            pa = torch.exp(_lce_logits(raw, softcap, logit_scale, logit_divisor) - s.unsqueeze(1)) * \
                a_rows.unsqueeze(1)
            d = torch.where(cols == t.unsqueeze(1), pa - b_rows.unsqueeze(1), pa)
            if c is not None:
                d = d - c.narrow(0, r0, nr).unsqueeze(1)
            d = _lce_dlogits(d, raw, softcap, logit_scale, logit_divisor)
            if hidden_grad:
                dh[r0:r0 + nr] += (d @ w).float()
            if weight_grad:
                dw[c0:c0 + nc] += (d.t() @ h).float()
    dh = dh.to(dtype) if hidden_grad else hidden.new_zeros((0, hidden.shape[1]))
    dw = dw.to(weight.dtype) if weight_grad else weight.new_zeros((0, weight.shape[1]))
    return dh, dw


lowering.register_impl("linear_cross_entropy", "torch", reference, **lowering.TRACEABLE)
lowering.register_impl("linear_cross_entropy_backward", "torch", reference_backward, **lowering.TRACEABLE)


# -------------------------------------------------------------------------------------------------- target: ttx
def _kernels():
    """kernels/cross_entropy.py, imported on first use: Triton is needed only where ttx runs."""
    from ..kernels import cross_entropy as kernels
    return kernels


LCE_CHUNK_BYTES = 256 << 20  # the logits of one chunk of rows: 1024 rows of a 128K vocabulary in bf16 (K = 1024
#                              keeps dweight's accumulating GEMM compute-bound; its memory is beside the step's peak)
LCE_MIN_ROWS = 128  # a chunk's GEMMs stay large enough to run at full rate


def _lce_rows(n: int, v: int, dtype: torch.dtype, buffers: int) -> int:
    """Rows per chunk: as many as fit LCE_CHUNK_BYTES of logits in `buffers` chunk buffers, a multiple of
    LCE_MIN_ROWS where that many fit."""
    rows = max(1, LCE_CHUNK_BYTES // max(1, buffers * v * torch.finfo(dtype).bits // 8))
    if rows >= LCE_MIN_ROWS:
        rows -= rows % LCE_MIN_ROWS
    return max(1, min(rows, n))


def _lce_pass(hidden, weight, labels, ignore_index, logit_ops, lse, row_loss=None, a=None, b=None, dh=None,
              dw=None, row_sum=None, c=None):
    """One pass over the rows of hidden in chunks. Per chunk, its logits by one GEMM in hidden's dtype (what
    `F.linear(h, W)` computes: fp32 accumulation, rounded once), then
      - row_loss given: the loss kernel writes the chunk's lse and per-row loss (and rows' sums into row_sum,
        where given: label smoothing's);
      - a, b (c) given (shared.cross_entropy_row_grads): the backward kernel overwrites the logits with dlogits in
        their dtype (eager's `.float()` backward rounds dlogits to it too); dh[chunk] = dlogits @ W, one GEMM over
        the whole vocabulary (rounded once, as eager); dw = dlogits.T @ h, the first chunk written, the next added
        by the GEMM's epilogue (beta = 1: fp32 sum, rounded to dw's dtype once per chunk -- the one rounding eager
        does not have; 4 chunks at Llama-3 sizes, none where all rows fit one chunk).
    logit_ops = (softcap, logit_scale, logit_divisor) (ops/linear_cross_entropy.py). A scale or divisor other than
    1 is applied to the GEMM's output in place, and dlogits go back through the divisor's and the scale's
    backwards in place. A softcap c (Gemma2) takes a second chunk buffer (the chunks halve): the (scaled) output
    becomes tanh(z / c) in place, the logits are that times c, and dlogits go back through `* c`, tanh's backward
    and `/ c`. All are torch's elementwise ops in hidden's dtype, each rounding as eager's op does.
    The GEMMs are cuBLAS's (torch.mm); the loop order is fixed and nothing is atomic: deterministic."""
    kernels = _kernels()
    n, v = hidden.shape[0], weight.shape[0]
    softcap, logit_scale, logit_divisor = logit_ops
    rows = _lce_rows(n, v, hidden.dtype, 2 if softcap else 1)
    weight_t = weight.t()
    chunk = torch.empty((rows, v), dtype=hidden.dtype, device=hidden.device)  # one buffer for every chunk's logits
    capped = torch.empty_like(chunk) if softcap else None
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        h, t = hidden[r0:r1], labels[r0:r1]
        logits = torch.mm(h, weight_t, out=chunk[:r1 - r0])
        if logit_scale != 1:
            logits.mul_(logit_scale)
        if logit_divisor != 1:
            logits.div_(logit_divisor)
        if softcap:
            tanh = logits.div_(softcap).tanh_()
            logits = torch.mul(tanh, softcap, out=capped[:r1 - r0])
        if row_loss is not None:
            kernels.cross_entropy_fwd(logits, t, ignore_index, out=(row_loss[r0:r1], lse[r0:r1]),
                                      row_sum=None if row_sum is None else row_sum[r0:r1])
        if a is None:
            continue
        kernels.cross_entropy_bwd(logits, t, lse[r0:r1], a[r0:r1], b[r0:r1], out=logits,
                                  c=None if c is None else c[r0:r1])
        if softcap:
            torch.ops.aten.tanh_backward.grad_input(logits.mul_(softcap), tanh, grad_input=logits).div_(softcap)
        if logit_divisor != 1:
            logits.div_(logit_divisor)
        if logit_scale != 1:
            logits.mul_(logit_scale)
        if dh is not None:
            torch.mm(logits, weight, out=dh[r0:r1])
        if dw is not None:
            if r0 == 0:
                torch.mm(logits.t(), h, out=dw)
            else:
                dw.addmm_(logits.t(), h)


def _lce_grads(hidden, weight, hidden_grad: bool, weight_grad: bool):
    """(dh, dw) to write into; [0, H] where not asked for. dw starts at zero only where no chunk writes it."""
    h = hidden.shape[1]
    dh = torch.empty(hidden.shape, dtype=hidden.dtype, device=hidden.device) if hidden_grad else \
        hidden.new_empty((0, h))
    dw = (torch.empty if hidden.shape[0] else torch.zeros)(weight.shape, dtype=weight.dtype, device=weight.device) \
        if weight_grad else weight.new_empty((0, h))
    return dh, dw


def _lce_reason(hidden, weight, labels, *rows):
    reason = ttx_device_reason(hidden)
    if reason:
        return reason
    if hidden.dtype not in FLOAT_DTYPES or hidden.dim() != 2 or weight.dtype != hidden.dtype:
        return f"hidden {hidden.dtype} {tuple(hidden.shape)} / weight {weight.dtype} are not [N, H] fp16/bf16/fp32"
    if labels.dtype != torch.int64 or labels.dim() != 1:
        return f"labels {labels.dtype} {tuple(labels.shape)} are not int64 [N]"
    if any(t is not None and t.device != hidden.device for t in (weight, labels, *rows)):
        return "inputs on different devices"
    return None


def _supports_linear_cross_entropy(hidden, weight, labels, *rest):
    return _lce_reason(hidden, weight, labels)


def _supports_linear_cross_entropy_backward(grad_loss, grad_lse, hidden, weight, labels, lse, *rest):
    return _lce_reason(hidden, weight, labels, grad_loss, grad_lse, lse)


def ttx_forward(hidden, weight, labels, ignore_index, reduction, hidden_grad, weight_grad, softcap, logit_scale,
                logit_divisor, label_smoothing):
    """Loss and lse per chunk of rows; with hidden_grad / weight_grad, the gradients for an upstream gradient of 1
    in the same pass (the chunk's logits become its dlogits): three GEMMs in all."""
    n, v = hidden.shape[0], weight.shape[0]
    lse = torch.empty(n, dtype=torch.float32, device=hidden.device)
    row_loss = torch.empty(n, dtype=torch.float32, device=hidden.device)
    row_sum = torch.empty(n, dtype=torch.float32, device=hidden.device) if label_smoothing else None
    dh, dw = _lce_grads(hidden, weight, hidden_grad, weight_grad)
    a = b = c = None
    if hidden_grad or weight_grad:
        one = torch.ones((), dtype=torch.float32, device=hidden.device)
        a, b, c = shared.cross_entropy_row_grads(one, None, labels, ignore_index, reduction, v, label_smoothing)
    _lce_pass(hidden, weight, labels, ignore_index, (softcap, logit_scale, logit_divisor), lse, row_loss, a, b,
              dh if hidden_grad else None, dw if weight_grad else None, row_sum=row_sum, c=c)
    row_loss = shared.cross_entropy_smoothed(row_loss, lse, row_sum, labels, ignore_index, v, label_smoothing)
    return shared.cross_entropy_reduce(row_loss, labels, ignore_index, reduction), lse, dh, dw


def ttx_backward(grad_loss, grad_lse, hidden, weight, labels, lse, ignore_index, reduction, hidden_grad,
                 weight_grad, softcap, logit_scale, logit_divisor, label_smoothing):
    """The logits recomputed per chunk of rows, then as the forward's gradient pass (a fourth GEMM: the path of a
    per-row loss, a gradient of lse, or a gradient the forward was not asked for)."""
    dh, dw = _lce_grads(hidden, weight, hidden_grad, weight_grad)
    if hidden_grad or weight_grad:
        a, b, c = shared.cross_entropy_row_grads(grad_loss, grad_lse, labels, ignore_index, reduction,
                                                 weight.shape[0], label_smoothing)
        _lce_pass(hidden, weight, labels, ignore_index, (softcap, logit_scale, logit_divisor), lse, None, a, b,
                  dh if hidden_grad else None, dw if weight_grad else None, c=c)
    return dh, dw


# Not traceable (the default): chunk loops over cuBLAS GEMMs and kernels writing into slices run as they are, with
# concrete sizes, where Inductor calls the op.
lowering.register_impl("linear_cross_entropy", "ttx", ttx_forward, supports=_supports_linear_cross_entropy)
lowering.register_impl("linear_cross_entropy_backward", "ttx", ttx_backward,
                       supports=_supports_linear_cross_entropy_backward)


# -------------------------------------------------------------------------------------------- target: torch_npu
# The torch reference on npu tensors: no torch_npu op is mapped to it yet. Registered so that the report names
# torch_npu, not a fallback.
def _npu_reason(hidden):
    return None if hidden.device.type == "npu" else f"torch_npu runs on npu tensors, not {hidden.device.type}"


lowering.register_impl("linear_cross_entropy", "torch_npu", reference,
                       supports=lambda hidden, *rest: _npu_reason(hidden), **lowering.TRACEABLE)
lowering.register_impl("linear_cross_entropy_backward", "torch_npu", reference_backward,
                       supports=lambda grad_loss, grad_lse, hidden, *rest: _npu_reason(hidden), **lowering.TRACEABLE)
