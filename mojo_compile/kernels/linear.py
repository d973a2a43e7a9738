"""Triton GEMV kernels for decode (issue 15): y = x @ W.T for x of at most MAX_ROWS = 4 rows, where every nn.Linear of
a batch-1 (or batch <= 4) decode step reads its whole weight once and cuBLAS reaches only 1.2-3.7 TB/s on such
shapes. Three launchers share one form of kernel:

  linear_fwd(x, w)                     y = x @ w.T
  linears_fwd(x, [w0, w1(, w2)])       (x @ w0.T, x @ w1.T, ...): q, k and v of one x in ONE launch; the program ids
                                       run over the concatenated output features, each program picks its weight
  gated_linear_fwd(x, wg, wu, act)     act(x @ wg.T) * (x @ wu.T), both weights read in one pass

The form (measured on the H200 against cuBLAS, Llama-3-8B decode shapes; a Triton experiment of issue 15; the
configs below): one program per BLOCK_N whole weight rows (output features; 1 or 2 at one row of x), walking K in
BLOCK_K-column steps (1024 at one row). The fp32 accumulator is a 2-D tile [BLOCK_N, BLOCK_K] per input row,
reduced over K once at the end; the weight tile is loaded once per step and reused for every row. The rows are
unrolled at compile time (M is a constexpr, accumulators acc0..acc3): a first version with one 3-D accumulator
[rows, BLOCK_N, BLOCK_K] compiled to slower code than cuBLAS. Masks on the K tail and the N tail; x's rows may
have any stride (0: an expanded x), every last dim has unit stride (the ops' `supports` refuse anything else).

Numerics: fp32 products and sums, the result rounded once to x's dtype (eager's GEMM accumulates in fp32 too; the
order of the sum differs, so the result is as accurate as eager's, not bit-equal). gated_linear rounds as eager's
three ops do: gate and up rounded to the dtype, act computed in fp32 on the rounded gate and rounded, the product
rounded (`round_to`: the interpreter truncates fp32 -> bf16 otherwise).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import ACT_CODES, gated_activation, interpreting, round_to, size_hint, wrap_triton, writes

MAX_ROWS = 4  # input rows (the product of x's leading dims) the kernels take: one accumulator tile each


# ----------------------------------------------------------------------------------------------------------- kernels
@triton.jit
def _accumulate(acc0, acc1, acc2, acc3, w, X, stride_x, cols, k_mask, M: tl.constexpr):
    """acc_r += w * x_r[None, :] for each row r < M: the weight tile w [BLOCK_N, BLOCK_K] (fp32) is reused."""
    x0 = tl.load(X + cols, mask=k_mask, other=0.0).to(tl.float32)
    acc0 += w * x0[None, :]
    if M > 1:
        x1 = tl.load(X + stride_x + cols, mask=k_mask, other=0.0).to(tl.float32)
        acc1 += w * x1[None, :]
    if M > 2:
        x2 = tl.load(X + 2 * stride_x + cols, mask=k_mask, other=0.0).to(tl.float32)
        acc2 += w * x2[None, :]
    if M > 3:
        x3 = tl.load(X + 3 * stride_x + cols, mask=k_mask, other=0.0).to(tl.float32)
        acc3 += w * x3[None, :]
    return acc0, acc1, acc2, acc3


@writes("Y0", Y1=lambda a: a["NUM_W"] >= 2, Y2=lambda a: a["NUM_W"] >= 3)
@triton.jit
def _linear_kernel(X, W0, W1, W2, Y0, Y1, Y2, N0, N1, N2, K, stride_x, stride_w0, stride_w1, stride_w2, P1, P2,
                   M: tl.constexpr, NUM_W: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   INTERPRET: tl.constexpr):
    """Y_i [M, N_i] (contiguous) = X [M, K] (row stride stride_x) @ W_i.T for NUM_W weights W_i [N_i, K] (row stride
    stride_w_i). Programs [0, P1) compute Y0, [P1, P2) Y1, [P2, ...) Y2; BLOCK_N output features each."""
    pid = tl.program_id(0)
    zero = pid * 0  # `+ zero`: each scalar an int32 value in both arms of the ifs below, also where a launch
    #                 specialises an argument equal to 1 into a constant
    w_ptr, y_ptr, n_out, stride_w, local = W0, Y0, N0 + zero, stride_w0 + zero, pid
    if NUM_W >= 2:
        if pid >= P1:
            w_ptr, y_ptr, n_out, stride_w, local = W1, Y1, N1 + zero, stride_w1 + zero, pid - P1
    if NUM_W >= 3:
        if pid >= P2:
            w_ptr, y_ptr, n_out, stride_w, local = W2, Y2, N2 + zero, stride_w2 + zero, pid - P2
    n = local * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = n < n_out
    w_rows = w_ptr + n.to(tl.int64)[:, None] * stride_w
    acc0 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    acc1 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    acc3 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        cols = k + tl.arange(0, BLOCK_K)
        k_mask = cols < K
        w = tl.load(w_rows + cols[None, :], mask=n_mask[:, None] & k_mask[None, :], other=0.0).to(tl.float32)
        acc0, acc1, acc2, acc3 = _accumulate(acc0, acc1, acc2, acc3, w, X, stride_x, cols, k_mask, M)
    dtype = Y0.dtype.element_ty
    tl.store(y_ptr + n, round_to(tl.sum(acc0, axis=1), dtype, INTERPRET), mask=n_mask)
    if M > 1:
        tl.store(y_ptr + n_out + n, round_to(tl.sum(acc1, axis=1), dtype, INTERPRET), mask=n_mask)
    if M > 2:
        tl.store(y_ptr + 2 * n_out + n, round_to(tl.sum(acc2, axis=1), dtype, INTERPRET), mask=n_mask)
    if M > 3:
        tl.store(y_ptr + 3 * n_out + n, round_to(tl.sum(acc3, axis=1), dtype, INTERPRET), mask=n_mask)


@triton.jit
def _gated_row(y_ptr, n, n_mask, acc_g, acc_u, ACT: tl.constexpr, INTERPRET: tl.constexpr):
    """One row of act(g) * u with eager's roundings: g, u rounded to the dtype, act in fp32 on the rounded g and
    rounded, the product rounded."""
    dtype = y_ptr.dtype.element_ty
    g = round_to(tl.sum(acc_g, axis=1), dtype, INTERPRET).to(tl.float32)
    u = round_to(tl.sum(acc_u, axis=1), dtype, INTERPRET).to(tl.float32)
    a = round_to(gated_activation(g, ACT, INTERPRET), dtype, INTERPRET).to(tl.float32)
    tl.store(y_ptr + n, round_to(a * u, dtype, INTERPRET), mask=n_mask)


@writes("Y")
@triton.jit
def _gated_kernel(X, WG, WU, Y, N, K, stride_x, stride_wg, stride_wu, M: tl.constexpr, ACT: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, INTERPRET: tl.constexpr):
    """Y [M, N] (contiguous) = act(X @ WG.T) * (X @ WU.T); BLOCK_N output features of both weights per program."""
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = n < N
    g_rows = WG + n.to(tl.int64)[:, None] * stride_wg
    u_rows = WU + n.to(tl.int64)[:, None] * stride_wu
    g0 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    g1 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    g2 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    g3 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    u0 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    u1 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    u2 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    u3 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        cols = k + tl.arange(0, BLOCK_K)
        k_mask = cols < K
        mask = n_mask[:, None] & k_mask[None, :]
        wg = tl.load(g_rows + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        wu = tl.load(u_rows + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        g0, g1, g2, g3 = _accumulate(g0, g1, g2, g3, wg, X, stride_x, cols, k_mask, M)
        u0, u1, u2, u3 = _accumulate(u0, u1, u2, u3, wu, X, stride_x, cols, k_mask, M)
    _gated_row(Y, n, n_mask, g0, u0, ACT, INTERPRET)
    if M > 1:
        _gated_row(Y + N, n, n_mask, g1, u1, ACT, INTERPRET)
    if M > 2:
        _gated_row(Y + 2 * N, n, n_mask, g2, u2, ACT, INTERPRET)
    if M > 3:
        _gated_row(Y + 3 * N, n, n_mask, g3, u3, ACT, INTERPRET)


# --------------------------------------------------------------------------------------------------------- configs
# Launch configs and where the GEMV is used at all, as data: measured on the H200 (bf16, torch 2.11, Triton 3.6,
# CUDA-graph replay; Llama-3-8B decode shapes; microseconds, cuBLAS's `F.linear` against this kernel):
#
#   rows  config (BLOCK_N, BLOCK_K, warps)   q/o 4096x4096  k/v 1024x4096  gate/up 14336x4096  down 4096x14336
#   1     (2, 1024, 4); K >= 8192: 1 row     10.4 / 7.6     6.7 / 3.1      29.9 / 29.3          31.3 / 29.1
#   2     (2, 512, 2)                        10.1 / 7.8     6.3 / 3.6      30.4 / 33.1          32.4 / 31.0
#   3     (8, 512, 2)                         9.7 / 8.9     6.3 / 4.2      30.0 / 40.2          32.2 / 36.1
#   4     (2, 512, 2)                         9.8 / 13.7    6.2 / 4.7      30.1 / 49.6          32.2 / 46.2
#   LM head 128256x4096: 1 row 237 / 233, 2 rows 249 / 262, 4 rows 250 / 406.
#
# At one row the kernel beats cuBLAS on every shape (the measurement; q, k, v in one launch: 12.9 us against
# cuBLAS's three 27.6; the gated MLP's both projections with the activation: 54.3 us against eager's 67.3). With
# more rows each weight tile feeds more FMAs and reloads of x's rows, and cuBLAS (whose time does not grow with the
# rows) wins on the large weights: the ttx target takes 2-4 rows only for weights up to MAX_WEIGHT[rows] elements
# (linear2 / linear3: the largest weight, q's -- q, k, v in one launch: 15.8 / 20.5 / 28.7 us at 2 / 3 / 4 rows
# against cuBLAS's 28.0 / 28.1 / 28.4; gated_linear: both weights together -- 90.7 us against eager's 64.6 for
# Llama-8B's at 2 rows), and leaves the others to cuBLAS (`gemv_reason`; the torch reference).
LONG_ROW = 8192
CONFIGS = {1: (2, 1024, 4), 2: (2, 512, 2), 3: (8, 512, 2), 4: (2, 512, 2)}
MAX_WEIGHT = {1: None, 2: 1 << 24, 3: 1 << 24, 4: 1 << 22}  # weight elements (N * K) the GEMV takes at that many rows
INTERPRETER_BLOCK_N = 16  # the interpreter's cost is per program: fewer, larger ones


def gemv_reason(m: int, weight_elements) -> str | None:
    """None where the GEMV is the faster kernel for m rows against weights of this many elements (the table above),
    else why cuBLAS runs instead."""
    limit = MAX_WEIGHT.get(m)
    if limit is not None and size_hint(weight_elements) > limit:
        return (f"cuBLAS is faster than the GEMV kernel for {m} rows against {size_hint(weight_elements)} weight "
                f"elements (over {limit}; kernels/linear.py's table)")
    return None


def config(n: int, k: int, m: int = 1, gated: bool = False) -> tuple[int, int, int]:
    """(BLOCK_N, BLOCK_K, num_warps) for m rows against weights [n, k] (sizes may be symbolic: a hint picks, no
    guard). gated: two weight tiles a program (gate and up), so one row of each."""
    block_n, block_k, num_warps = CONFIGS[m]
    if gated or (m == 1 and size_hint(k) >= LONG_ROW):
        block_n = 1  # gated: 2 M accumulator tiles (3 rows of (8, 512, 2) spilled: 1.4 ms for gate/up)
    block_k = min(block_k, max(16, triton.next_power_of_2(max(size_hint(k), 1))))
    if interpreting():
        block_n = min(INTERPRETER_BLOCK_N, triton.next_power_of_2(max(size_hint(n), 1)))
    return block_n, block_k, num_warps


# --------------------------------------------------------------------------------------------------------- launchers
def _rows(x: torch.Tensor, m: int) -> torch.Tensor:
    """x [..., K] as [M, K] (a view where the leading dims merge; an expanded x keeps its row stride 0)."""
    return x.reshape(m, x.shape[-1])


def _check(x: torch.Tensor, *weights: torch.Tensor) -> int:
    """The number of rows M (1..MAX_ROWS), or ValueError: the ops' `supports` refuse all of this first."""
    m = 1
    for s in x.shape[:-1]:
        m *= s
    if not isinstance(m, int) or not 1 <= m <= MAX_ROWS:
        raise ValueError(f"linear kernels: x must have 1 to {MAX_ROWS} static rows, got {list(x.shape)}")
    for w in weights:
        if w.dim() != 2 or w.shape[1] != x.shape[-1] or w.dtype != x.dtype:
            raise ValueError(f"linear kernels: weight {w.dtype}{list(w.shape)} does not fit x {x.dtype}"
                             f"{list(x.shape)}")
    return m


def _launch_linears(x, weights, cfg=None):
    m = _check(x, *weights)
    x2 = _rows(x, m)
    k = x.shape[-1]
    # each output in its final shape, fresh and contiguous (the kernel writes it as [M, N_i] by its pointer): not a
    # view of a 2-D buffer, which a caller could not write in place after a no_grad call
    ys = [torch.empty((*x.shape[:-1], w.shape[0]), dtype=x.dtype, device=x.device) for w in weights]
    n_max = max(w.shape[0] for w in weights)
    block_n, block_k, num_warps = cfg or config(n_max, k, m)
    programs = [triton.cdiv(w.shape[0], block_n) for w in weights]
    starts = [sum(programs[:i]) for i in range(len(weights))]
    total = sum(programs)
    if total > 0:
        pad = 3 - len(weights)  # unused slots: any tensor argument; never read or written (NUM_W is a constexpr)
        ws, outs = [*weights, *[x2] * pad], [*ys, *[x2] * pad]
        ns = [w.shape[0] for w in weights] + [0] * pad
        strides = [w.stride(0) for w in weights] + [0] * pad
        p1 = starts[1] if len(weights) > 1 else total
        p2 = starts[2] if len(weights) > 2 else total
        wrap_triton(_linear_kernel)[(total,)](x2, *ws, *outs, *ns, k, x2.stride(0), *strides, p1, p2, M=m,
                                              NUM_W=len(weights), BLOCK_N=block_n, BLOCK_K=block_k,
                                              INTERPRET=interpreting(), num_warps=num_warps)
    return ys


def linear_fwd(x: torch.Tensor, weight: torch.Tensor, cfg=None) -> torch.Tensor:
    """x @ weight.T: x [..., K] with at most MAX_ROWS rows, weight [N, K] (unit column strides), y [..., N] in x's
    dtype, new and contiguous. `cfg` = (BLOCK_N, BLOCK_K, num_warps) overrides the table."""
    return _launch_linears(x, [weight], cfg)[0]


def linears_fwd(x: torch.Tensor, weights, cfg=None) -> list:
    """[x @ w.T for w in weights] (2 or 3 weights of one K) in one launch."""
    if not 1 <= len(weights) <= 3:
        raise ValueError(f"linears_fwd takes 1 to 3 weights, got {len(weights)}")
    return _launch_linears(x, list(weights), cfg)


def gated_linear_fwd(x: torch.Tensor, gate_weight: torch.Tensor, up_weight: torch.Tensor, act: str,
                     cfg=None) -> torch.Tensor:
    """act(x @ gate_weight.T) * (x @ up_weight.T), y [..., N] in x's dtype, new and contiguous."""
    if act not in ACT_CODES:
        raise ValueError(f"gated_linear: act must be one of {tuple(ACT_CODES)}, got {act!r}")
    m = _check(x, gate_weight, up_weight)
    if gate_weight.shape != up_weight.shape:
        raise ValueError(f"gated_linear: gate {list(gate_weight.shape)} and up {list(up_weight.shape)} differ")
    x2 = _rows(x, m)
    n, k = gate_weight.shape
    y = torch.empty((*x.shape[:-1], n), dtype=x.dtype, device=x.device)  # fresh: see _launch_linears
    block_n, block_k, num_warps = cfg or config(n, k, m, gated=True)
    programs = triton.cdiv(n, block_n)
    if programs > 0:
        wrap_triton(_gated_kernel)[(programs,)](x2, gate_weight, up_weight, y, n, k, x2.stride(0),
                                                gate_weight.stride(0), up_weight.stride(0), M=m,
                                                ACT=ACT_CODES[act], BLOCK_N=block_n, BLOCK_K=block_k,
                                                INTERPRET=interpreting(), num_warps=num_warps)
    return y
