"""Target `torch`: the pure-PyTorch reference of every Mojo op, and the last fallback of every other target.

Written as the eager spellings the patterns replace, so that on this target a compiled model computes exactly what
the uncompiled one does, rounding included. Outputs are contiguous, as the fake impls promise.
"""
from __future__ import annotations

import torch

from .table import Table

TABLE = Table("torch")


def _implements(fn):
    """Registers `fn` as the torch implementation of the op of its name: plain torch ops, always traceable (the
    inner compiler sees inside the op and fuses it with its neighbours)."""
    return TABLE.implement(fn.__name__, fn, traceable=lambda *args: True)


def normalise(x, weight, eps, weight_offset, cast):
    """RMSNorm of the rows of x as the `cast` spelling rounds it (ops/rms_norm.py): (y, rstd fp32)."""
    x32 = x.float()
    rstd = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    if cast in ("normed", "rstd"):
        y = x * rstd.to(x.dtype) if cast == "rstd" else (x32 * rstd).to(x.dtype)
        if weight is not None:  # == `weight * y` in the promoted dtype: the fp32 product of two halves is exact
            y = (y.float() * (weight.float() + weight_offset)).to(torch.promote_types(weight.dtype, x.dtype))
    else:  # "output": everything in fp32, one cast at the end
        y = x32 * rstd
        if weight is not None:
            y = y * (weight.float() + weight_offset)
        y = y.to(x.dtype)
    return y.contiguous(), rstd.squeeze(-1).contiguous()


def rms_norm_grad(grad_y, x, weight, rstd, grad_residual, weight_offset, cast, weight_grad):
    """fp32 gradient of y = n * w_eff with n = x * rstd (the casts are treated as identities)."""
    g = grad_y.float()
    n = x.float() * rstd.unsqueeze(-1)
    grad_n = g if weight is None else g * (weight.float() + weight_offset)
    grad_x = rstd.unsqueeze(-1) * (grad_n - n * (grad_n * n).mean(-1, keepdim=True))
    if grad_residual is not None:
        grad_x = grad_x + grad_residual.float()
    if weight is not None and weight_grad:
        n_seen = n.to(x.dtype).float() if cast == "normed" else n  # the weight multiplied the rounded value
        grad_w = (g * n_seen).reshape(-1, x.shape[-1]).sum(0).to(weight.dtype)
    else:
        grad_w = x.new_empty((0,))
    return grad_x.to(x.dtype).contiguous(), grad_w


# ------------------------------------------------------------------------------------------------ cross entropy
CHUNK_ELEMENTS = 1 << 24  # fp32 temporaries per chunk of rows (64 MB), where the sizes are static


def row_chunks(*row_tensors):
    """The tensors (first dim N) split in chunks of rows, so that a [rows, V] fp32 temporary stays at most
    CHUNK_ELEMENTS; one chunk where N or V is symbolic (Inductor fuses the fp32 math there anyway)."""
    n, v = row_tensors[0].shape[0], row_tensors[0].shape[-1]
    if not (isinstance(n, int) and isinstance(v, int)) or n * v <= CHUNK_ELEMENTS:
        return [row_tensors]
    rows = max(1, CHUNK_ELEMENTS // max(v, 1))
    return list(zip(*(t.split(rows) for t in row_tensors)))


def cross_entropy_rows(labels, ignore_index, n_classes):
    """(ignored, bad) per row: the label is ignore_index; the label is neither that nor a class in [0, V)."""
    ignored = labels == ignore_index
    return ignored, ~ignored & ((labels < 0) | (labels >= n_classes))


def cross_entropy_reduce(row_loss, labels, ignore_index, reduction):
    """The per-row losses (fp32, 0 on ignored rows) reduced as torch does: deterministic torch ops."""
    if reduction == "none":
        return row_loss
    total = row_loss.sum()
    if reduction == "sum":
        return total
    return total / (labels != ignore_index).sum().to(torch.float32)  # 0 / 0 = NaN when every row is ignored


def cross_entropy_row_grads(grad_loss, grad_lse, labels, ignore_index, reduction, n_classes,
                            label_smoothing=0.0):
    """(a, b, c), fp32 [N] (c None without label smoothing): dlogits[i, j] = softmax(logits)[i, j] * a[i]
    - (j == labels[i]) * b[i] - c[i]. With g the loss's gradient per row (0 on ignored rows, NaN on rows with a
    label out of range): a = g plus the gradient of lse, b = (1 - eps) g, c = eps g / V -- the smoothed target
    puts 1 - eps on the label and eps / V on every class."""
    ignored, bad = cross_entropy_rows(labels, ignore_index, n_classes)
    g = grad_loss.float()
    if reduction == "mean":
        g = g / (~ignored).sum().to(torch.float32)
    g = torch.where(ignored, 0.0, torch.where(bad, float("nan"), g.expand(labels.shape)))
    a = g if grad_lse is None else g + grad_lse.float()
    if not label_smoothing:
        return a, g, None
    return a, g * (1 - label_smoothing), g * (label_smoothing / n_classes)


def cross_entropy_smoothed(nll, lse, row_sum, labels, ignore_index, n_classes, label_smoothing):
    """The per-row loss with label smoothing eps, as torch's: (1 - eps) * nll + eps / V * smooth, where smooth =
    -sum_j log_softmax_j = V * lse - sum_j logits_j (row_sum, fp32); 0 on ignored rows, NaN where nll is. Without
    smoothing, nll itself."""
    if not label_smoothing:
        return nll
    ignored = labels == ignore_index
    smooth = lse - row_sum / n_classes
    return torch.where(ignored, 0.0, nll * (1 - label_smoothing) + smooth * label_smoothing)


# ------------------------------------------------------------------------------------- the LM head fused with the loss
LCE_BLOCKS = None  # (rows, vocabulary columns) per block; None: LCE_ROWS rows, columns to fill CHUNK_ELEMENTS
LCE_ROWS = 4096


def _lce_blocks(hidden, weight):
    """(row chunks of [0, N), column blocks of [0, V)) as (start, size) lists. One chunk along a symbolic size."""
    n, v = hidden.shape[0], weight.shape[0]
    rows, cols = LCE_BLOCKS or (LCE_ROWS, None)
    if cols is None:
        cols = max(1, CHUNK_ELEMENTS // rows)

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


@_implements
def linear_cross_entropy(hidden, weight, labels, ignore_index, reduction, hidden_grad, weight_grad, softcap,
                         logit_scale=1.0, logit_divisor=1.0, label_smoothing=0.0):
    """Blockwise over rows and vocabulary: per block the logits (_lce_logits), lse merged by logaddexp (online
    logsumexp; -inf with -inf stays -inf, NaN propagates), the label's logit picked from the block holding it.
    At most one [rows, cols] fp32 block alive; nothing [N, V]. The gradients for an upstream gradient of 1, where
    asked for, by the backward below (a second pass: this is the reference, not the fast path)."""
    logit_ops = (softcap, logit_scale, logit_divisor)
    loss, lse = linear_cross_entropy_loss(hidden, weight, labels, ignore_index, reduction, *logit_ops,
                                          label_smoothing)
    dh, dw = linear_cross_entropy_backward(torch.ones_like(loss), None, hidden, weight, labels, lse, ignore_index,
                                           reduction, hidden_grad, weight_grad, *logit_ops, label_smoothing)
    return loss, lse, dh, dw


def linear_cross_entropy_loss(hidden, weight, labels, ignore_index, reduction, softcap, logit_scale=1.0,
                              logit_divisor=1.0, label_smoothing=0.0):
    """(loss, lse) blockwise in torch ops, differentiable (the ops' backward of a second order uses it)."""
    row_spans, col_spans = _lce_blocks(hidden, weight)
    v = weight.shape[0]
    ignored, bad = cross_entropy_rows(labels, ignore_index, v)
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
    row = torch.where(ignored, 0.0, torch.where(bad, float("nan"), lse - picked))
    row = cross_entropy_smoothed(row, lse, row_sum, labels, ignore_index, v, label_smoothing)
    return cross_entropy_reduce(row, labels, ignore_index, reduction), lse


@_implements
def linear_cross_entropy_backward(grad_loss, grad_lse, hidden, weight, labels, lse, ignore_index, reduction,
                                  hidden_grad, weight_grad, softcap, logit_scale=1.0, logit_divisor=1.0,
                                  label_smoothing=0.0):
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
    a, b, c = cross_entropy_row_grads(grad_loss, grad_lse, labels, ignore_index, reduction, v, label_smoothing)
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
