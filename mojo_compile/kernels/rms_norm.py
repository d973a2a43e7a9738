"""Triton RMSNorm kernels: forward (with an optional residual add in front) and backward, plus their launchers.

Layout: the input is viewed as rows [M, N] (N = the normalised last dim). A row that fits in registers
(N <= MAX_FUSED_N) is read once; BLOCK_M rows share a program when rows are short. Longer rows loop over
column chunks: one pass for the sum of squares, one to normalise (the second read mostly hits L2).

Numerics (see ops/rms_norm.py for the cast modes): every load is cast to fp32 at once, all math is fp32, and the
roundings the eager spelling performs (the bf16 sum of x + residual, the cast of the normalised value in "normed"
mode) are reproduced with explicit casts. That also keeps the kernels right under TRITON_INTERPRET=1, whose bf16
arithmetic is wrong. Scalars are cast to fp32 in the kernel (torch.compile may hand Python floats over as fp64).

The backward is deterministic: each program owns a fixed block of rows and writes its own fp32 partial of the
weight gradient, and the partials are summed by torch afterwards -- no atomics.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import (CAST_CODES, contiguous_rows, device_caps, few_rows_config, interpreting, normalise, round_to,
                     wrap_triton, writes)

MAX_FUSED_N = 16384  # longest row kept in registers
LOOP_BLOCK_N = 4096  # column chunk of the looping kernels


# ----------------------------------------------------------------------------------------------------------- helpers
@triton.jit
def _stream(P, mask, EVICT: tl.constexpr):
    """A load read once: with EVICT, marked first to leave L2 so the weight and the outputs stay."""
    if EVICT:
        return tl.load(P, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
    return tl.load(P, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _load_input(X, R, S, offs, mask, HAS_RES: tl.constexpr, STORE_SUM: tl.constexpr, INTERPRET: tl.constexpr,
                EVICT: tl.constexpr = False):
    """x (+ residual, rounded to the input dtype like eager's add), as fp32. Optionally stores the sum."""
    x = _stream(X + offs, mask, EVICT)
    if HAS_RES:
        r = _stream(R + offs, mask, EVICT)
        x = round_to(x + r, X.dtype.element_ty, INTERPRET)
        if STORE_SUM:
            tl.store(S + offs, x, mask=mask)
        x = x.to(tl.float32)
    return x


# ----------------------------------------------------------------------------------------------------------- forward
@writes("Y", "RSTD", S="HAS_RES")
@triton.jit
def _fwd_rows_kernel(X, R, W, Y, S, RSTD, M, N, eps, weight_offset,
                     HAS_RES: tl.constexpr, HAS_W: tl.constexpr, CAST: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, INTERPRET: tl.constexpr, EVICT: tl.constexpr,
                     PERSISTENT: tl.constexpr):
    """One block of BLOCK_M rows a program, or (PERSISTENT: one program per core) every num_programs-th block."""
    eps = tl.cast(eps, tl.float32)
    weight_offset = tl.cast(weight_offset, tl.float32)
    if PERSISTENT:
        for block in range(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.num_programs(0)):
            _fwd_rows(block, X, R, W, Y, S, RSTD, M, N, eps, weight_offset, HAS_RES, HAS_W, CAST, BLOCK_M, BLOCK_N,
                      INTERPRET, EVICT)
    else:
        _fwd_rows(tl.program_id(0), X, R, W, Y, S, RSTD, M, N, eps, weight_offset, HAS_RES, HAS_W, CAST, BLOCK_M,
                  BLOCK_N, INTERPRET, EVICT)


@triton.jit
def _fwd_rows(block, X, R, W, Y, S, RSTD, M, N, eps, weight_offset,
              HAS_RES: tl.constexpr, HAS_W: tl.constexpr, CAST: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, INTERPRET: tl.constexpr, EVICT: tl.constexpr):
    rows = (block * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    row_ok = rows < M
    col_ok = cols < N
    mask = row_ok[:, None] & col_ok[None, :]
    offs = rows[:, None] * N + cols[None, :]
    x = _load_input(X, R, S, offs, mask, HAS_RES, True, INTERPRET, EVICT)
    rstd = tl.math.rsqrt(tl.sum(x * x, axis=1) / N + eps)
    tl.store(RSTD + rows, rstd, mask=row_ok)
    w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :] if HAS_W else 0.0
    y = normalise(x, rstd[:, None], w, weight_offset, X.dtype.element_ty, HAS_W, CAST, INTERPRET)
    tl.store(Y + offs, round_to(y, Y.dtype.element_ty, INTERPRET), mask=mask)


@writes("Y", "RSTD", S="HAS_RES")
@triton.jit
def _fwd_loop_kernel(X, R, W, Y, S, RSTD, M, N, eps, weight_offset,
                     HAS_RES: tl.constexpr, HAS_W: tl.constexpr, CAST: tl.constexpr, BLOCK_N: tl.constexpr,
                     INTERPRET: tl.constexpr, PERSISTENT: tl.constexpr):
    """One row a program, or (PERSISTENT) every num_programs-th row."""
    eps = tl.cast(eps, tl.float32)
    weight_offset = tl.cast(weight_offset, tl.float32)
    if PERSISTENT:
        for row in range(tl.program_id(0), M, tl.num_programs(0)):
            _fwd_loop_row(row, X, R, W, Y, S, RSTD, N, eps, weight_offset, HAS_RES, HAS_W, CAST, BLOCK_N, INTERPRET)
    else:
        _fwd_loop_row(tl.program_id(0), X, R, W, Y, S, RSTD, N, eps, weight_offset, HAS_RES, HAS_W, CAST, BLOCK_N,
                      INTERPRET)


@triton.jit
def _fwd_loop_row(row, X, R, W, Y, S, RSTD, N, eps, weight_offset,
                  HAS_RES: tl.constexpr, HAS_W: tl.constexpr, CAST: tl.constexpr, BLOCK_N: tl.constexpr,
                  INTERPRET: tl.constexpr):
    row = tl.cast(row, tl.int64)  # (an int in the interpreter's persistent loop)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = _load_input(X, R, S, row * N + cols, cols < N, HAS_RES, True, INTERPRET)
        acc += x * x
    rstd = tl.math.rsqrt(tl.sum(acc, axis=0) / N + eps)
    tl.store(RSTD + row, rstd)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_ok = cols < N
        # recompute the sum rather than read S back: no read-after-write hazard
        x = _load_input(X, R, S, row * N + cols, col_ok, HAS_RES, False, INTERPRET)
        w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32) if HAS_W else 0.0
        y = normalise(x, rstd, w, weight_offset, X.dtype.element_ty, HAS_W, CAST, INTERPRET)
        tl.store(Y + row * N + cols, round_to(y, Y.dtype.element_ty, INTERPRET), mask=col_ok)


# ---------------------------------------------------------------------------------------------------------- backward
@triton.jit
def _grad_terms(x, dy, rstd, w, HAS_W: tl.constexpr):
    n = x * rstd
    dn = dy * w if HAS_W else dy
    return n, dn


@writes("DX", DW="WEIGHT_GRAD")
@triton.jit
def _bwd_rows_kernel(DY, X, W, RSTD, DRES, DX, DW, M, N, rows_per_program, weight_offset,
                     HAS_W: tl.constexpr, HAS_DRES: tl.constexpr, WEIGHT_GRAD: tl.constexpr, CAST: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, INTERPRET: tl.constexpr):
    weight_offset = tl.cast(weight_offset, tl.float32)
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < N
    w = (tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32) + weight_offset)[None, :] if HAS_W else 1.0
    dw = tl.zeros([BLOCK_N], dtype=tl.float32)
    for i in range(0, rows_per_program, BLOCK_M):
        rows = (pid * rows_per_program + i + tl.arange(0, BLOCK_M)).to(tl.int64)
        row_ok = rows < M
        mask = row_ok[:, None] & col_ok[None, :]
        offs = rows[:, None] * N + cols[None, :]
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(RSTD + rows, mask=row_ok, other=0.0)[:, None]
        n, dn = _grad_terms(x, dy, rstd, w, HAS_W)
        if WEIGHT_GRAD:
            n_seen = round_to(n, X.dtype.element_ty, INTERPRET).to(tl.float32) if CAST == 0 else n
            dw += tl.sum(dy * n_seen, axis=0)
        dx = (dn - n * (tl.sum(dn * n, axis=1) / N)[:, None]) * rstd
        if HAS_DRES:
            dx += tl.load(DRES + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(DX + offs, round_to(dx, DX.dtype.element_ty, INTERPRET), mask=mask)
    if WEIGHT_GRAD:
        tl.store(DW + pid * N + cols, dw, mask=col_ok)


@writes("DX", DW="WEIGHT_GRAD")
@triton.jit
def _bwd_loop_kernel(DY, X, W, RSTD, DRES, DX, DW, M, N, rows_per_program, weight_offset,
                     HAS_W: tl.constexpr, HAS_DRES: tl.constexpr, WEIGHT_GRAD: tl.constexpr, CAST: tl.constexpr,
                     BLOCK_N: tl.constexpr, INTERPRET: tl.constexpr):
    """DW must be zero-initialised: each program accumulates into its own row of partials."""
    weight_offset = tl.cast(weight_offset, tl.float32)
    pid = tl.program_id(0)
    for i in range(0, rows_per_program):
        row = (pid * rows_per_program + i).to(tl.int64)
        if row < M:
            rstd = tl.load(RSTD + row)
            acc = tl.zeros([BLOCK_N], dtype=tl.float32)
            for start in range(0, N, BLOCK_N):
                cols = start + tl.arange(0, BLOCK_N)
                col_ok = cols < N
                x = tl.load(X + row * N + cols, mask=col_ok, other=0.0).to(tl.float32)
                dy = tl.load(DY + row * N + cols, mask=col_ok, other=0.0).to(tl.float32)
                w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32) + weight_offset if HAS_W else 1.0
                n, dn = _grad_terms(x, dy, rstd, w, HAS_W)
                acc += dn * n
            c = tl.sum(acc, axis=0) / N
            for start in range(0, N, BLOCK_N):
                cols = start + tl.arange(0, BLOCK_N)
                col_ok = cols < N
                x = tl.load(X + row * N + cols, mask=col_ok, other=0.0).to(tl.float32)
                dy = tl.load(DY + row * N + cols, mask=col_ok, other=0.0).to(tl.float32)
                w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32) + weight_offset if HAS_W else 1.0
                n, dn = _grad_terms(x, dy, rstd, w, HAS_W)
                dx = (dn - n * c) * rstd
                if HAS_DRES:
                    dx += tl.load(DRES + row * N + cols, mask=col_ok, other=0.0).to(tl.float32)
                tl.store(DX + row * N + cols, round_to(dx, DX.dtype.element_ty, INTERPRET), mask=col_ok)
                if WEIGHT_GRAD:
                    n_seen = round_to(n, X.dtype.element_ty, INTERPRET).to(tl.float32) if CAST == 0 else n
                    partial = tl.load(DW + pid * N + cols, mask=col_ok, other=0.0)
                    tl.store(DW + pid * N + cols, partial + dy * n_seen, mask=col_ok)


# --------------------------------------------------------------------------------------------------------- launchers
# (BLOCK_M, num_warps) by BLOCK_N for (norm, add + norm): the best of a sweep on an H200, bf16, 16384 rows
# (benchmarks/tune_norms.py). Other widths use the formula in _fwd_config.
_FWD_TUNED = {128: ((16, 4), (8, 4)), 2048: ((1, 2), (1, 8)), 4096: ((2, 16), (1, 8)), 8192: ((2, 16), (1, 16))}


def _fwd_config(n: int, residual: bool, m, sm_count: int) -> tuple[int, int, int, bool]:
    """(BLOCK_M, BLOCK_N, num_warps, EVICT) of the row kernel; BLOCK_N > MAX_FUSED_N selects the loop kernel.
    `m` (rows) may be symbolic; only a static m below the SM count picks the latency config."""
    block_n = triton.next_power_of_2(n)
    if block_n > MAX_FUSED_N:
        return 1, LOOP_BLOCK_N, 8, False
    if block_n in _FWD_TUNED:
        block_m, num_warps = _FWD_TUNED[block_n][residual]
    else:
        block_m = max(1, min(16, 4096 // block_n))
        num_warps = min(16, max(1, block_m * block_n // 512))
    block_m, num_warps = few_rows_config(m, block_m, block_n, sm_count) or (block_m, num_warps)
    if interpreting():
        block_m = max(block_m, 16384 // block_n)  # fewer, larger programs: each costs ~1 ms in the interpreter
    return block_m, block_n, num_warps, False


def rms_norm_fwd(x, residual, weight, eps, weight_offset, cast, out_dtype, config=None):
    """Returns (y, sum or None, rstd) shaped like x, x and x.shape[:-1]. `config` = (BLOCK_M, num_warps[, EVICT])
    or ("loop", BLOCK_N, num_warps) overrides the heuristic (benchmarks/tune_norms.py)."""
    n = x.shape[-1]
    x2 = contiguous_rows(x)
    r2 = contiguous_rows(residual) if residual is not None else None
    m = x2.shape[0]
    # Allocated in the result's shape and handed to the kernel as [M, N] views: an op output that is a view of
    # another tensor cannot be modified in place by the caller under autograd.
    y_out = torch.empty(x.shape, dtype=out_dtype, device=x.device)
    total_out = torch.empty(x.shape, dtype=x.dtype, device=x.device) if residual is not None else None
    rstd_out = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    y, rstd = y_out.view(m, n), rstd_out.view(m)
    total = total_out.view(m, n) if total_out is not None else None
    if m > 0 and n > 0:
        block_m, block_n, num_warps, evict = _fwd_config(n, residual is not None, m, device_caps(x.device).vector_cores)
        if config is not None and config[0] == "loop":  # ("loop", BLOCK_N, num_warps): the two-pass kernel
            block_n, num_warps = config[1], config[2]
        elif config is not None and block_n >= n:
            block_m, num_warps, evict = (tuple(config) + (evict,))[:3]
        args = (x2, r2 if r2 is not None else x2, weight if weight is not None else x2, y,
                total if total is not None else y, rstd)
        flags = dict(HAS_RES=residual is not None, HAS_W=weight is not None, CAST=CAST_CODES[cast],
                     INTERPRET=interpreting())
        caps = device_caps(x.device)
        if block_n >= n:
            wrap_triton(_fwd_rows_kernel)[(caps.programs(triton.cdiv(m, block_m)),)](
                *args, m, n, eps, weight_offset, **flags, BLOCK_M=block_m, BLOCK_N=block_n, EVICT=evict,
                PERSISTENT=caps.persistent, num_warps=num_warps)
        else:
            wrap_triton(_fwd_loop_kernel)[(caps.programs(m),)](*args, m, n, eps, weight_offset, **flags,
                                                               BLOCK_N=block_n, PERSISTENT=caps.persistent,
                                                               num_warps=num_warps)
    return y_out, total_out, rstd_out


def rms_norm_bwd(grad_y, x, weight, rstd, grad_residual, weight_offset, cast, weight_grad, config=None):
    """Returns (grad_x, grad_weight or an empty tensor). `config` = (BLOCK_M, num_warps, programs per SM)."""
    n = x.shape[-1]
    x2, dy2 = contiguous_rows(x), contiguous_rows(grad_y)
    dres2 = contiguous_rows(grad_residual) if grad_residual is not None else None
    rstd1 = rstd.reshape(-1).contiguous()
    m = x2.shape[0]
    dx = torch.empty_like(x2)
    weight_grad = weight is not None and weight_grad
    if m == 0 or n == 0:
        grad_w = torch.zeros_like(weight) if weight_grad else x.new_empty((0,))
        return dx.view(x.shape), grad_w
    block_n = triton.next_power_of_2(n)
    loop = block_n > MAX_FUSED_N
    # Tuned on an H200 (benchmarks/tune_norms.py): ~8-16K elements per step, a few programs per SM.
    block_m = 1 if loop else min(32, max(1, (16384 if block_n >= 4096 else 8192) // block_n))
    num_warps = min(16, max(4, block_n // 512))
    per_sm = min(4, max(1, 4096 // block_n))
    if config is not None and not loop:
        block_m, num_warps, per_sm = config
    caps = device_caps(x.device)
    max_programs = caps.vector_cores * (1 if caps.persistent else per_sm)  # persistent: one program per core
    num_programs = torch.sym_min(max_programs, triton.cdiv(m, block_m))  # m may be symbolic: no guard
    rows_per_program = triton.cdiv(triton.cdiv(m, num_programs), block_m) * block_m
    num_programs = triton.cdiv(m, rows_per_program)
    partial_shape = (num_programs, n) if weight_grad else (1,)
    dw = (torch.zeros if loop else torch.empty)(partial_shape, dtype=torch.float32, device=x.device)
    args = (dy2, x2, weight if weight is not None else x2, rstd1, dres2 if dres2 is not None else x2, dx, dw,
            m, n, rows_per_program, weight_offset)
    flags = dict(HAS_W=weight is not None, HAS_DRES=dres2 is not None, WEIGHT_GRAD=weight_grad,
                 CAST=CAST_CODES[cast], INTERPRET=interpreting())
    if loop:
        wrap_triton(_bwd_loop_kernel)[(num_programs,)](*args, **flags, BLOCK_N=LOOP_BLOCK_N, num_warps=8)
    else:
        wrap_triton(_bwd_rows_kernel)[(num_programs,)](*args, **flags, BLOCK_M=block_m, BLOCK_N=block_n,
                                                       num_warps=num_warps)
    grad_w = dw.sum(0).to(weight.dtype) if weight_grad else x.new_empty((0,))
    return dx.view(x.shape), grad_w
