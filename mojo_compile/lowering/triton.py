"""Target `ttx`: Triton kernels. NVIDIA GPUs natively, Ascend through triton-ascend, CPU tensors under
TRITON_INTERPRET=1 (how CI checks the kernels)."""
from __future__ import annotations

import torch

from ..kernels import cross_entropy as ce_kernels
from ..kernels.common import FLOAT_DTYPES
from ..kernels.common import ttx_device_reason as _device_reason
from . import reference
from .table import Table

TABLE = Table("ttx")  # each op's entry registered below its implementation


# ------------------------------------------------------------------------------- the LM head fused with the loss
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
      - a, b (c) given (reference.cross_entropy_row_grads): the backward kernel overwrites the logits with dlogits in
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
            ce_kernels.cross_entropy_fwd(logits, t, ignore_index, out=(row_loss[r0:r1], lse[r0:r1]),
                                         row_sum=None if row_sum is None else row_sum[r0:r1])
        if a is None:
            continue
        ce_kernels.cross_entropy_bwd(logits, t, lse[r0:r1], a[r0:r1], b[r0:r1], out=logits,
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
    reason = _device_reason(hidden)
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


def linear_cross_entropy(hidden, weight, labels, ignore_index, reduction, hidden_grad, weight_grad, softcap,
                         logit_scale, logit_divisor, label_smoothing):
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
        a, b, c = reference.cross_entropy_row_grads(one, None, labels, ignore_index, reduction, v, label_smoothing)
    _lce_pass(hidden, weight, labels, ignore_index, (softcap, logit_scale, logit_divisor), lse, row_loss, a, b,
              dh if hidden_grad else None, dw if weight_grad else None, row_sum=row_sum, c=c)
    row_loss = reference.cross_entropy_smoothed(row_loss, lse, row_sum, labels, ignore_index, v, label_smoothing)
    return reference.cross_entropy_reduce(row_loss, labels, ignore_index, reduction), lse, dh, dw


def linear_cross_entropy_backward(grad_loss, grad_lse, hidden, weight, labels, lse, ignore_index, reduction,
                                  hidden_grad, weight_grad, softcap, logit_scale, logit_divisor, label_smoothing):
    """The logits recomputed per chunk of rows, then as the forward's gradient pass (a fourth GEMM: the path of a
    per-row loss, a gradient of lse, or a gradient the forward was not asked for)."""
    dh, dw = _lce_grads(hidden, weight, hidden_grad, weight_grad)
    if hidden_grad or weight_grad:
        a, b, c = reference.cross_entropy_row_grads(grad_loss, grad_lse, labels, ignore_index, reduction,
                                                    weight.shape[0], label_smoothing)
        _lce_pass(hidden, weight, labels, ignore_index, (softcap, logit_scale, logit_divisor), lse, None, a, b,
                  dh if hidden_grad else None, dw if weight_grad else None, c=c)
    return dh, dw


# Not traceable (the default): chunk loops over cuBLAS GEMMs and kernels writing into slices run as they are, with
# concrete sizes, where Inductor calls the op.
TABLE.implement("linear_cross_entropy", linear_cross_entropy, supports=_supports_linear_cross_entropy)
TABLE.implement("linear_cross_entropy_backward", linear_cross_entropy_backward,
                supports=_supports_linear_cross_entropy_backward)
