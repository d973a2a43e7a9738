"""Triton LayerNorm kernels, forward and backward, and their launchers (ops/layer_norm.py has the contract).

Layout: the input is viewed as rows [M, N] (N = the normalised last dim). A row is held in registers (N <=
MAX_FUSED_N; longer rows are the torch reference's, ops/layer_norm.py says so); BLOCK_M rows share a program when
rows are short. The forward runs a program per block of rows, or a persistent grid (a few programs per SM, one per
core on a persistent device) whose programs load the weight and bias once and loop over blocks. The backward always
loops: each program owns a fixed run of rows. Where a program loops, NUM_STAGES > 1 lets the compiler issue the next
blocks' loads while one block computes. The launch configs are tables by BLOCK_N (_FWD_TUNED, _BWD_TUNED).

Numerics: every load is cast to fp32 at once and all math is fp32, as eager's kernels compute: the mean, then the
biased variance of the centred row (two passes over registers: no cancellation), rstd = rsqrt(var + eps), y =
(x - mean) * rstd * w + b, rounded once to the output dtype. mean and rstd are stored in fp32 for the backward.
Scalars are cast to fp32 in the kernel (torch.compile may hand Python floats over as fp64).

Residual add (add_layer_norm_fwd): sum = x + residual is rounded to x's dtype and stored, and the norm reads the
rounded sum, as eager's add then layer norm does.

Backward: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w, xhat = (x - mean) * rstd, plus the
gradient reaching a residual add's sum through its other uses (grad_residual), added in fp32 before the one
rounding. dw = sum over rows of dy * xhat, db = sum of dy: each program owns a fixed block of rows and writes its
own fp32 partials, summed by torch afterwards -- deterministic, no atomics.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import (contiguous_rows, device_caps, few_rows_config, interpreting, pipeline_stages, round_to,
                     wrap_triton, writes)

MAX_FUSED_N = 16384  # longest row kept in registers


@writes("Y", "MEAN", "RSTD", SUM="HAS_RES")
@triton.jit
def _fwd_kernel(X, R, W, B, Y, SUM, MEAN, RSTD, M, N, eps, HAS_RES: tl.constexpr, HAS_W: tl.constexpr,
                HAS_B: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, INTERPRET: tl.constexpr,
                PERSISTENT: tl.constexpr, NUM_STAGES: tl.constexpr):
    """One block of BLOCK_M rows a program, or (PERSISTENT: a few programs per core) every num_programs-th block,
    the weight and bias loaded once per program and, with NUM_STAGES > 1, the next blocks' loads issued while this
    one computes."""
    eps = tl.cast(eps, tl.float32)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < N
    w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :] if HAS_W else 1.0
    b = tl.load(B + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :] if HAS_B else 0.0
    if PERSISTENT:
        for block in tl.range(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.num_programs(0), num_stages=NUM_STAGES):
            _fwd_rows(block, X, R, w, b, Y, SUM, MEAN, RSTD, M, N, eps, HAS_RES, HAS_W, HAS_B, BLOCK_M, BLOCK_N,
                      INTERPRET)
    else:
        _fwd_rows(tl.program_id(0), X, R, w, b, Y, SUM, MEAN, RSTD, M, N, eps, HAS_RES, HAS_W, HAS_B, BLOCK_M,
                  BLOCK_N, INTERPRET)


@triton.jit
def _fwd_rows(block, X, R, w, b, Y, SUM, MEAN, RSTD, M, N, eps, HAS_RES: tl.constexpr, HAS_W: tl.constexpr,
              HAS_B: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, INTERPRET: tl.constexpr):
    rows = (block * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    row_ok = rows < M
    col_ok = cols < N
    mask = row_ok[:, None] & col_ok[None, :]
    offs = rows[:, None] * N + cols[None, :]
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    if HAS_RES:
        total = round_to(x + tl.load(R + offs, mask=mask, other=0.0).to(tl.float32), SUM.dtype.element_ty, INTERPRET)
        tl.store(SUM + offs, total, mask=mask)
        x = total.to(tl.float32)
    mean = tl.sum(x, axis=1) / N
    xc = tl.where(mask, x - mean[:, None], 0.0)
    rstd = tl.math.rsqrt(tl.sum(xc * xc, axis=1) / N + eps)
    y = xc * rstd[:, None]
    if HAS_W:
        y = y * w
    if HAS_B:
        y = y + b
    tl.store(Y + offs, round_to(y, Y.dtype.element_ty, INTERPRET), mask=mask)
    tl.store(MEAN + rows, mean, mask=row_ok)
    tl.store(RSTD + rows, rstd, mask=row_ok)


@writes("DX", DW="WEIGHT_GRAD", DB="BIAS_GRAD")
@triton.jit
def _bwd_kernel(DY, X, W, MEAN, RSTD, DRES, DX, DW, DB, M, N, rows_per_program, HAS_W: tl.constexpr,
                HAS_DRES: tl.constexpr, WEIGHT_GRAD: tl.constexpr, BIAS_GRAD: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, INTERPRET: tl.constexpr, NUM_STAGES: tl.constexpr):
    """NUM_STAGES > 1 asks the compiler to prefetch the next blocks' loads while this one computes (a program owns
    many blocks, and a few programs per SM are too few to hide memory latency alone)."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < N
    w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :] if HAS_W else 1.0
    dw = tl.zeros([BLOCK_N], dtype=tl.float32)
    db = tl.zeros([BLOCK_N], dtype=tl.float32)
    for i in tl.range(0, rows_per_program, BLOCK_M, num_stages=NUM_STAGES):
        rows = (pid * rows_per_program + i + tl.arange(0, BLOCK_M)).to(tl.int64)
        row_ok = rows < M
        mask = row_ok[:, None] & col_ok[None, :]
        offs = rows[:, None] * N + cols[None, :]
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
        mean = tl.load(MEAN + rows, mask=row_ok, other=0.0)[:, None]
        rstd = tl.load(RSTD + rows, mask=row_ok, other=0.0)[:, None]
        xhat = tl.where(mask, (x - mean) * rstd, 0.0)
        g = dy * w
        dx = (g - tl.sum(g, axis=1)[:, None] / N - xhat * (tl.sum(g * xhat, axis=1) / N)[:, None]) * rstd
        if HAS_DRES:
            dx += tl.load(DRES + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(DX + offs, round_to(dx, DX.dtype.element_ty, INTERPRET), mask=mask)
        if WEIGHT_GRAD:
            dw += tl.sum(dy * xhat, axis=0)
        if BIAS_GRAD:
            db += tl.sum(dy, axis=0)
    if WEIGHT_GRAD:
        tl.store(DW + pid * N + cols, dw, mask=col_ok)
    if BIAS_GRAD:
        tl.store(DB + pid * N + cols, db, mask=col_ok)


# --------------------------------------------------------------------------------------------------------- launchers
# Launch configs by BLOCK_N: the best of a sweep on an H200, bf16, 16384 rows (benchmarks/tune_norms.py
# --layer-norm). Other widths use the formulas in _fwd_config and _bwd_config.
# BLOCK_N: ((BLOCK_M, num_warps, programs per SM, NUM_STAGES) of layer_norm, of add_layer_norm)
_FWD_TUNED = {2048: ((1, 4, 0, 1), (1, 4, 0, 1)),
              4096: ((2, 2, 0, 1), (2, 16, 0, 1)),
              8192: ((1, 4, 0, 1), (1, 16, 0, 1))}
# BLOCK_N: (BLOCK_M, num_warps, programs per SM, NUM_STAGES)
_BWD_TUNED = {2048: (4, 4, 1, 3), 4096: (2, 8, 1, 3), 8192: (1, 8, 1, 3)}


def _fwd_config(n: int, residual: bool, m, sm_count: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, num_warps, programs per SM, NUM_STAGES); programs per SM 0: one program per block of rows. The
    formula: about 4K elements a program for short rows, one row of more warps for long ones. A static row count
    `m` with fewer blocks than SMs takes the latency config (common.few_rows_config)."""
    block_n = triton.next_power_of_2(n)
    if block_n in _FWD_TUNED:
        config = _FWD_TUNED[block_n][residual]
    else:
        block_m = max(1, min(16, 4096 // block_n))
        config = block_m, min(16, max(1, block_m * block_n // 512)), 0, 1
    few = few_rows_config(m, config[0], block_n, sm_count)  # (the tables are swept at 16384 rows)
    return (*few, 0, 1) if few is not None else config


def _bwd_config(n: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, num_warps, programs per SM, NUM_STAGES): ~8K elements a step, a few programs per SM."""
    block_n = triton.next_power_of_2(n)
    if block_n in _BWD_TUNED:
        return _BWD_TUNED[block_n]
    return min(32, max(1, 8192 // block_n)), min(16, max(4, block_n // 512)), min(4, max(1, 4096 // block_n)), 1


def layer_norm_fwd(x, weight, bias, eps, config=None):
    """(y like x, mean and rstd fp32 shaped x.shape[:-1]). `config` = (BLOCK_M, num_warps[, programs per SM,
    NUM_STAGES]) overrides the table."""
    y, _, mean, rstd = _fwd(x, None, weight, bias, eps, config)
    return y, mean, rstd


def add_layer_norm_fwd(x, residual, weight, bias, eps, config=None):
    """(y, sum = x + residual, both like x; mean and rstd of the sum, fp32 shaped x.shape[:-1]). residual: x's shape
    and dtype."""
    return _fwd(x, residual, weight, bias, eps, config)


def _fwd(x, residual, weight, bias, eps, config):
    n = x.shape[-1]
    x2 = contiguous_rows(x)
    r2 = contiguous_rows(residual) if residual is not None else None
    m = x2.shape[0]
    # Outputs allocated in their own shape, handed to the kernel as [M, N] views (an op output that is a view of
    # another tensor could not be modified in place by the caller under autograd).
    y_out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    sum_out = torch.empty(x.shape, dtype=x.dtype, device=x.device) if residual is not None else None
    mean_out = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    rstd_out = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    if m > 0 and n > 0:
        block_n = triton.next_power_of_2(n)
        caps = device_caps(x.device)
        if config is None:
            block_m, num_warps, per_sm, num_stages = _fwd_config(n, residual is not None, m, caps.vector_cores)
            if interpreting():  # fewer, larger programs: each costs ~1 ms in the interpreter
                block_m = max(block_m, 16384 // block_n)
        else:
            block_m, num_warps, per_sm, num_stages = (tuple(config) + (0, 1))[:4]
        y = y_out.view(m, n)
        num_stages = pipeline_stages(caps, num_stages, block_m * block_n * x.element_size() * (1 + (r2 is not None)))
        grid = triton.cdiv(m, block_m)  # a program per block of rows, unless persistent:
        if caps.persistent:  # the device maps programs to cores: one per core
            grid = caps.programs(grid)
        elif per_sm > 0:  # at most per_sm programs per SM, each looping over blocks
            grid = torch.sym_min(grid, per_sm * caps.vector_cores)  # m may be symbolic: no guard
        wrap_triton(_fwd_kernel)[(grid,)](
            x2, r2 if r2 is not None else x2, weight if weight is not None else x2, bias if bias is not None else x2,
            y, sum_out.view(m, n) if sum_out is not None else y, mean_out.view(m), rstd_out.view(m), m, n, eps,
            HAS_RES=residual is not None, HAS_W=weight is not None, HAS_B=bias is not None, BLOCK_M=block_m,
            BLOCK_N=block_n, INTERPRET=interpreting(), PERSISTENT=caps.persistent or per_sm > 0, NUM_STAGES=num_stages,
            num_warps=num_warps)
    return y_out, sum_out, mean_out, rstd_out


def layer_norm_bwd(grad_y, x, weight, mean, rstd, weight_grad: bool, bias_grad: bool, config=None,
                   grad_residual=None):
    """(grad_x like x, grad_weight, grad_bias): the parameters' gradients in x's dtype (the launcher takes weight
    and bias of x's dtype) where asked for, else empty. grad_residual (like x, or None) is added to grad_x: the
    gradient reaching an add_layer_norm's sum through its other uses. `config` = (BLOCK_M, num_warps, programs per
    SM[, NUM_STAGES])."""
    n = x.shape[-1]
    x2, dy2 = contiguous_rows(x), contiguous_rows(grad_y)
    dres2 = contiguous_rows(grad_residual) if grad_residual is not None else None
    m = x2.shape[0]
    dx = torch.empty_like(x2)
    weight_grad = weight is not None and weight_grad

    def empty():  # a fresh one per result: an op's outputs must not alias each other
        return x.new_empty((0,))
    if m == 0 or n <= 1:
        # No rows or no columns: nothing to reduce. One column: every row normalises to 0 whatever x is (y is the
        # bias), so grad_x is grad_residual alone and grad_weight is 0, exactly. The kernel's g - mean(g) would
        # cancel only to the GPU's FMA rounding of g, which rstd = 1/sqrt(eps) then amplifies.
        if dres2 is not None:
            dx.copy_(dres2)
        else:
            dx.zero_()
        grad_w = torch.zeros((n,), dtype=x.dtype, device=x.device) if weight_grad else empty()
        grad_b = dy2.float().sum(0).to(x.dtype) if bias_grad else empty()
        return dx.view(x.shape), grad_w, grad_b
    block_n = triton.next_power_of_2(n)
    block_m, num_warps, per_sm, num_stages = _bwd_config(n) if config is None else (tuple(config) + (1,))[:4]
    caps = device_caps(x.device)
    streamed = x2.element_size() + dy2.element_size() + (dres2.element_size() if dres2 is not None else 0)
    num_stages = pipeline_stages(caps, num_stages, block_m * block_n * streamed)
    sms = caps.vector_cores
    per_sm = 1 if caps.persistent else per_sm  # a persistent device: one program per core
    num_programs = torch.sym_min(per_sm * sms, triton.cdiv(m, block_m))  # m may be symbolic: no guard
    rows_per_program = triton.cdiv(triton.cdiv(m, num_programs), block_m) * block_m
    num_programs = triton.cdiv(m, rows_per_program)
    dw = torch.empty((num_programs, n) if weight_grad else (1,), dtype=torch.float32, device=x.device)
    db = torch.empty((num_programs, n) if bias_grad else (1,), dtype=torch.float32, device=x.device)
    wrap_triton(_bwd_kernel)[(num_programs,)](
        dy2, x2, weight if weight is not None else x2, mean.reshape(-1).contiguous(), rstd.reshape(-1).contiguous(),
        dres2 if dres2 is not None else x2, dx, dw, db, m, n, rows_per_program, HAS_W=weight is not None,
        HAS_DRES=dres2 is not None, WEIGHT_GRAD=weight_grad, BIAS_GRAD=bias_grad, BLOCK_M=block_m, BLOCK_N=block_n,
        INTERPRET=interpreting(), NUM_STAGES=num_stages, num_warps=num_warps)
    grad_w = dw.sum(0).to(x.dtype) if weight_grad else empty()
    grad_b = db.sum(0).to(x.dtype) if bias_grad else empty()
    return dx.view(x.shape), grad_w, grad_b
