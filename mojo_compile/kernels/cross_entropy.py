"""Triton kernels for the cross-entropy loss on materialised logits [N, V] (bf16 / fp16 / fp32), forward and
backward, and their launchers (ops/cross_entropy.py has the contract).

Forward: one program per row, a loop over the row in BLOCK_V column blocks: a running max and sum of exponentials
per lane (online softmax; a lane that has seen only -inf keeps sum 0; a NaN is never dropped: it reaches the sum),
merged at the end into lse = max + log(sum); the label's logit is one masked load at a clamped address. It writes
lse [N] and the per-row loss [N] (fp32), and where label smoothing asks for it, the row's sum of logits [N] (fp32;
-inf where a logit is); the reduction over rows (sum, / count) and the smoothing's mix are torch's, after the
kernel: deterministic, and no atomics.

Backward: programs over (row, column block), dlogits = exp(x - lse) * a[row] - (col == label) * b[row] (- c[row]
with label smoothing: its uniform part), rounded once to the logits' dtype. a and b (fp32 [N]) carry the reduction,
the ignored rows (0) and rows with a label out of range (NaN); torch computes them from grad_loss and the labels
(lowering/reference.py: cross_entropy_row_grads). Nothing of size [N, V] is written but dlogits itself.

Every load is cast to fp32 at once (also what keeps the kernels right under TRITON_INTERPRET=1); exp and log are
libdevice's on the GPU (expf / logf, as torch's kernels), numpy's in the interpreter. Row offsets are int64: N * V
passes 2**31 at LLM sizes (8K tokens x 256K vocabulary).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import device_caps, expf, interpreting, logf, round_to, wrap_triton, writes


@triton.jit
def _finite(m):
    """The running max to subtract: 0 where it is -inf (a lane that has seen only -inf, whose sum is 0 and stays 0:
    exp(-inf - 0) = 0 where exp(-inf - -inf) would be NaN)."""
    return tl.where(m == float("-inf"), 0.0, m)


@writes("LSE", "LOSS", ROW_SUM="SUM")
@triton.jit
def _fwd_kernel(X, LABELS, LSE, LOSS, ROW_SUM, N, V, stride_x, IGNORE, BLOCK_V: tl.constexpr, SUM: tl.constexpr,
                INTERPRET: tl.constexpr, PERSISTENT: tl.constexpr):
    """One row a program, or (PERSISTENT: one program per core) every num_programs-th row."""
    if PERSISTENT:
        for row in range(tl.program_id(0), N, tl.num_programs(0)):
            _fwd_row(row, X, LABELS, LSE, LOSS, ROW_SUM, V, stride_x, IGNORE, BLOCK_V, SUM, INTERPRET)
    else:
        _fwd_row(tl.program_id(0), X, LABELS, LSE, LOSS, ROW_SUM, V, stride_x, IGNORE, BLOCK_V, SUM, INTERPRET)


@triton.jit
def _fwd_row(row, X, LABELS, LSE, LOSS, ROW_SUM, V, stride_x, IGNORE, BLOCK_V: tl.constexpr, SUM: tl.constexpr,
             INTERPRET: tl.constexpr):
    row = tl.cast(row, tl.int64)  # (an int in the interpreter's persistent loop)
    x_row = X + row * stride_x
    cols = tl.arange(0, BLOCK_V)
    m = tl.full([BLOCK_V], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK_V], dtype=tl.float32)
    total = tl.zeros([BLOCK_V], dtype=tl.float32)
    for start in range(0, V, BLOCK_V):
        c = start + cols
        x = tl.load(x_row + c, mask=c < V, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x, propagate_nan=tl.PropagateNan.ALL)  # a NaN stays (the GPU's max drops it)
        s = s * expf(m - _finite(m_new), INTERPRET) + expf(x - _finite(m_new), INTERPRET)
        m = m_new
        if SUM:
            total += tl.where(c < V, x, 0.0)
    m_row = tl.max(m, 0)  # a NaN lane's sum is NaN, whatever the reduction does with its max
    s_row = tl.sum(s * expf(m - _finite(m_row), INTERPRET), 0)
    lse = m_row + logf(s_row, INTERPRET)  # a row of -inf only: -inf (its loss NaN, as eager's)
    label = tl.load(LABELS + row)
    ignored = label == IGNORE
    valid = (label >= 0) & (label < V) & (label != IGNORE)
    picked = tl.load(x_row + tl.where(valid, label, 0), mask=valid, other=0.0).to(tl.float32)
    loss = tl.where(ignored, 0.0, tl.where(valid, lse - picked, float("nan")))
    tl.store(LSE + row, lse)
    tl.store(LOSS + row, loss)
    if SUM:
        tl.store(ROW_SUM + row, tl.sum(total, 0))


@writes("DX")
@triton.jit
def _bwd_kernel(X, LABELS, LSE, A, B, C, DX, N, V, stride_x, stride_dx, BLOCK_V: tl.constexpr,
                UNIFORM: tl.constexpr, INTERPRET: tl.constexpr, PERSISTENT: tl.constexpr):
    """A program per (row, column block), or (PERSISTENT: a 1-D grid of one program per core) every
    num_programs-th of them, column blocks fastest."""
    if PERSISTENT:
        col_blocks = tl.cdiv(V, BLOCK_V)
        for task in range(tl.program_id(0), N * col_blocks, tl.num_programs(0)):
            _bwd_block(task // col_blocks, task % col_blocks, X, LABELS, LSE, A, B, C, DX, V, stride_x, stride_dx,
                       BLOCK_V, UNIFORM, INTERPRET)
    else:
        _bwd_block(tl.program_id(0), tl.program_id(1), X, LABELS, LSE, A, B, C, DX, V, stride_x, stride_dx, BLOCK_V,
                   UNIFORM, INTERPRET)


@triton.jit
def _bwd_block(row, col_block, X, LABELS, LSE, A, B, C, DX, V, stride_x, stride_dx, BLOCK_V: tl.constexpr,
               UNIFORM: tl.constexpr, INTERPRET: tl.constexpr):
    row = tl.cast(row, tl.int64)
    c = col_block * BLOCK_V + tl.arange(0, BLOCK_V)
    mask = c < V
    x = tl.load(X + row * stride_x + c, mask=mask, other=0.0).to(tl.float32)
    lse = tl.load(LSE + row)
    a = tl.load(A + row)
    b = tl.load(B + row)
    label = tl.load(LABELS + row)
    pa = expf(x - lse, INTERPRET) * a
    d = tl.where(c == label, pa - b, pa)
    if UNIFORM:
        d -= tl.load(C + row)
    tl.store(DX + row * stride_dx + c, round_to(d, DX.dtype.element_ty, INTERPRET), mask=mask)


# --------------------------------------------------------------------------------------------------------- launchers
def _config(n_classes: int) -> tuple[int, int]:
    """(BLOCK_V, num_warps). GPU: 4096-column blocks (16 fp32 values per thread at 8 warps): a row of a 128K
    vocabulary is 32 iterations; not swept on a GPU yet. Interpreter: big blocks (few, slow iterations)."""
    block = triton.next_power_of_2(max(int(n_classes), 1))
    if interpreting():
        return min(block, 16384), 4
    block = min(block, 4096)
    return block, (8 if block >= 2048 else 4)


def _check(logits: torch.Tensor, labels: torch.Tensor) -> None:
    if logits.dim() != 2 or labels.shape != logits.shape[:1] or labels.dtype != torch.int64:
        raise ValueError(f"cross_entropy: logits [N, V] and int64 labels [N], got {logits.dtype}"
                         f"{tuple(logits.shape)} and {labels.dtype}{tuple(labels.shape)}")


def _columns(logits: torch.Tensor) -> torch.Tensor:
    """Rows with unit column stride (the kernels take a row stride): a copy only where the columns are strided."""
    return logits if logits.stride(1) == 1 or logits.shape[1] == 1 else logits.contiguous()


def cross_entropy_fwd(logits, labels, ignore_index: int, config=None, out=None, row_sum=None):
    """(row_loss, lse), fp32 [N] each: lse of every row; row_loss = lse - logits[i, label], 0 where the label is
    ignore_index, NaN where it is out of [0, V). `config` = (BLOCK_V, num_warps) overrides; `out` = (row_loss, lse),
    contiguous fp32 [N] each, to write into; `row_sum`, a contiguous fp32 [N] tensor: also write each row's sum of
    logits into it (label smoothing's)."""
    _check(logits, labels)
    x, labels = _columns(logits), labels.contiguous()
    n, v = x.shape
    if out is not None:
        row_loss, lse = out
    else:
        lse = torch.empty(n, dtype=torch.float32, device=x.device)
        row_loss = torch.empty(n, dtype=torch.float32, device=x.device)
    if n == 0:  # n may be symbolic: dynamo specialises 0 and 1, so this adds no guard for n >= 2
        return row_loss, lse
    block, num_warps = config or _config(v)
    caps = device_caps(x.device)
    wrap_triton(_fwd_kernel)[(caps.programs(n),)](x, labels, lse, row_loss, x if row_sum is None else row_sum, n, v,
                                                  x.stride(0), ignore_index, BLOCK_V=block, SUM=row_sum is not None,
                                                  INTERPRET=interpreting(), PERSISTENT=caps.persistent,
                                                  num_warps=num_warps)
    return row_loss, lse


def cross_entropy_bwd(logits, labels, lse, a, b, config=None, out=None, c=None):
    """dlogits [N, V] in the logits' dtype: exp(logits - lse) * a[:, None] - onehot(labels) * b[:, None]
    (- c[:, None] where c, fp32 [N], is given). `out`: an [N, V] tensor of that dtype with unit column stride to
    write into -- the logits themselves for dlogits in place (each element is read, then written, by the same
    program)."""
    _check(logits, labels)
    x, labels, lse, a, b = _columns(logits), labels.contiguous(), lse.contiguous(), a.contiguous(), b.contiguous()
    c = None if c is None else c.contiguous()
    n, v = x.shape
    dx = torch.empty((n, v), dtype=x.dtype, device=x.device) if out is None else out
    if out is not None and (out.shape != x.shape or out.dtype != x.dtype or (v > 1 and out.stride(1) != 1)):
        raise ValueError(f"cross_entropy_bwd: out must be [N, V] {x.dtype} with unit column stride, got "
                         f"{out.dtype} {tuple(out.shape)} {out.stride()}")
    if n == 0:
        return dx
    block, num_warps = config or _config(v)
    caps = device_caps(x.device)
    grid = (caps.programs(n * triton.cdiv(v, block)),) if caps.persistent else (n, triton.cdiv(v, block))
    wrap_triton(_bwd_kernel)[grid](x, labels, lse, a, b, a if c is None else c, dx, n, v, x.stride(0), dx.stride(0),
                                   BLOCK_V=block, UNIFORM=c is not None, INTERPRET=interpreting(),
                                   PERSISTENT=caps.persistent, num_warps=num_warps)
    return dx
