"""Triton GEMM with the gated activation (SwiGLU / GeGLU) in its epilogue: out = act(x @ Wg.T) * (x @ Wu.T).
An experiment kept beside its benchmark (bench_gated_gemm.py), not part of the package: no pattern lowers to it.

The unfused MLP writes the [M, 2I] gate/up product to HBM and reads it back for act(g) * u; here each program computes
a [BLOCK_M, BLOCK_N] tile of both products (two fp32 accumulators fed by the same x tile, so x is read once for both)
and applies the activation before the only store, of [BLOCK_M, BLOCK_N] outputs. Inference only (no backward).

Weights are in nn.Linear layout, [I, K] row-major (K contiguous). Either two weights, or one fused [2I, K] weight
(Phi3's `gate_up_proj` followed by chunk(2)): its halves are row slices, themselves [I, K] row-major, so the fused
form is the two-weight kernel on two views (no copy).

Numerics reproduce the eager roundings: g = linear(x, Wg) and u = linear(x, Wu) are rounded to the input dtype (fp32
accumulation, bias added in fp32 first, as cuBLAS' epilogue does), act(g) is computed in fp32 and rounded, and the
product of the two rounded values is rounded again. Only the GEMM accumulation order differs from cuBLAS, so results
are not bit exact (an output may differ by an ulp where g or u sits on a rounding boundary).

Interpreter (TRITON_INTERPRET=1): bf16 arithmetic and bf16 tl.dot are wrong there, so under the INTERPRET flag the
dot operands are upcast to fp32 and roundings go through `_round`; on a GPU the dot stays on bf16/fp16 tensor cores.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from mojo_compile.kernels.common import ACT_CODES, interpreting, round_to, size_hint, wrap_triton, writes

_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@triton.jit
def _act(g, ACT: tl.constexpr):
    """fp32 activation, in the closed forms eager's CUDA kernels use (to within an fp32 ulp or two)."""
    if ACT == 0:  # silu
        a = g * tl.sigmoid(g)
    elif ACT == 1:  # gelu tanh: 0.5 g (1 + tanh(z)) == g * sigmoid(2 z) (no tanh in core tl)
        z = 0.7978845608028654 * (g + 0.044715 * g * g * g)
        a = g * tl.sigmoid(2.0 * z)
    else:  # gelu (erf)
        a = 0.5 * g * (1.0 + tl.math.erf(g * 0.7071067811865476))
    return a


@writes("OUT")
@triton.jit
def _gated_gemm_kernel(X, WG, WU, BG, BU, OUT, M, N, K,
                       ACT: tl.constexpr, HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                       INTERPRET: tl.constexpr):
    """X [M, K], WG / WU [N, K], all row-major; OUT [M, N]. One [BLOCK_M, BLOCK_N] output tile per program."""
    # Grouped order: GROUP_M row blocks walk the column blocks together, so the weight tiles they share (and the
    # x rows) are still in L2 when the neighbours ask for them.
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group_size = GROUP_M * num_pid_n
    first_m = (pid // group_size) * GROUP_M
    group_m = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group_size) % group_m
    pid_n = (pid % group_size) // group_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # Out-of-range rows / columns are wrapped instead of masked (the store masks them): unmasked, aligned loads.
    rows = (offs_m % M).to(tl.int64)
    cols = (offs_n % N).to(tl.int64)
    x_ptrs = X + rows[:, None] * K + offs_k[None, :]  # [BLOCK_M, BLOCK_K]
    # The weights are [N, K] with K contiguous: address the [BLOCK_K, BLOCK_N] tile of W.T directly.
    wg_ptrs = WG + cols[None, :] * K + offs_k[:, None]
    wu_ptrs = WU + cols[None, :] * K + offs_k[:, None]

    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(x_ptrs)
            bg = tl.load(wg_ptrs)
            bu = tl.load(wu_ptrs)
        else:
            k_ok = offs_k < K - k * BLOCK_K
            a = tl.load(x_ptrs, mask=k_ok[None, :], other=0.0)
            bg = tl.load(wg_ptrs, mask=k_ok[:, None], other=0.0)
            bu = tl.load(wu_ptrs, mask=k_ok[:, None], other=0.0)
        if INTERPRET:  # the interpreter's bf16 dot multiplies bit patterns
            a = a.to(tl.float32)
            bg = bg.to(tl.float32)
            bu = bu.to(tl.float32)
        if X.dtype.element_ty == tl.float32 or INTERPRET:  # fp32 inputs: full precision, like eager (no TF32)
            acc_g = tl.dot(a, bg, acc_g, input_precision="ieee", out_dtype=tl.float32)
            acc_u = tl.dot(a, bu, acc_u, input_precision="ieee", out_dtype=tl.float32)
        else:
            acc_g = tl.dot(a, bg, acc_g, out_dtype=tl.float32)
            acc_u = tl.dot(a, bu, acc_u, out_dtype=tl.float32)
        x_ptrs += BLOCK_K
        wg_ptrs += BLOCK_K
        wu_ptrs += BLOCK_K

    n_ok = offs_n < N
    if HAS_BIAS:
        acc_g += tl.load(BG + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        acc_u += tl.load(BU + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    g = round_to(acc_g, OUT.dtype.element_ty, INTERPRET).to(tl.float32)  # the linear outputs, as eager stores them
    u = round_to(acc_u, OUT.dtype.element_ty, INTERPRET).to(tl.float32)
    a = round_to(_act(g, ACT), OUT.dtype.element_ty, INTERPRET).to(tl.float32)
    out = round_to(a * u, OUT.dtype.element_ty, INTERPRET)
    out_ptrs = OUT + offs_m.to(tl.int64)[:, None] * N + offs_n[None, :]
    tl.store(out_ptrs, out, mask=(offs_m < M)[:, None] & n_ok[None, :])


# --------------------------------------------------------------------------------------------------------- launchers
def _config(m: int, n: int, k: int, elem_bytes: int = 2) -> tuple[int, int, int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages) for an [m, k] x [k, n] gate/up pair on Hopper.

    Each program holds two accumulators, so a 128x128 tile does the work of a 128x256 GEMM tile (the usual best
    Hopper shape): 8 warps (two warpgroups of wgmma), 3 stages of 48 KB shared memory. Small M (decode) streams the
    weights: it is bandwidth bound, so the M tile shrinks to the tokens (16 at least, the smallest MMA tile) and the
    columns are split finely enough that every SM gets programs, with deep K steps to keep bytes in flight.
    fp32 (FMA dots, a correctness path) gets a small tile: the bf16 ones would spill and overflow shared memory.
    Compiled for sm_90 with ptxas (triton 3.9): every bf16 config here and in the benchmark sweep fits, no spills."""
    if interpreting():  # ~1-4 ms per program and K step, nearly whatever the tile: few programs for large shapes
        return (16 if m <= 64 else 64), (32 if n <= 128 else 128), 64, 2, 4, 1
    if elem_bytes == 4:
        return 64, 64, 32, 8, 8, 3
    if m <= 64:
        return max(16, triton.next_power_of_2(m)), 64, 128, 8, 4, 4
    if m <= 256:
        return 64, 128, 64, 8, 4, 4
    return 128, 128, 64, 8, 8, 3


def _launch(x, w_gate, w_up, b_gate, b_up, act, config):
    if act not in ACT_CODES:
        raise ValueError(f"gated_gemm: act must be one of {tuple(ACT_CODES)}, got {act!r}")
    k = x.shape[-1]
    n = w_gate.shape[0]
    if x.dtype not in _DTYPES or any(w.dtype != x.dtype for w in (w_gate, w_up)):
        raise ValueError(f"gated_gemm: x and weights must share a dtype in {_DTYPES}, got {x.dtype}, "
                         f"{w_gate.dtype}, {w_up.dtype}")
    if tuple(w_gate.shape) != (n, k) or tuple(w_up.shape) != (n, k):
        raise ValueError(f"gated_gemm: weights must be [I, K] = [{n}, {k}], got {tuple(w_gate.shape)}, "
                         f"{tuple(w_up.shape)}")
    if b_gate is not None and (tuple(b_gate.shape) != (n,) or tuple(b_up.shape) != (n,)):
        raise ValueError(f"gated_gemm: biases must be [{n}], got {tuple(b_gate.shape)}, {tuple(b_up.shape)}")
    x2 = x.reshape(-1, k).contiguous()
    # No-ops for nn.Linear weights and the halves of a fused weight (row slices of a row-major tensor).
    w_gate, w_up = w_gate.contiguous(), w_up.contiguous()
    b_gate, b_up = (b.contiguous() if b is not None else None for b in (b_gate, b_up))
    m = x2.shape[0]
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    block_m, block_n, block_k, group_m, num_warps, num_stages = config or _config(size_hint(m), n, k, x.element_size())
    has_bias = b_gate is not None
    grid = (triton.cdiv(m, block_m) * triton.cdiv(n, block_n),)  # 0 programs when m == 0: nothing launches
    # EVEN_K branches on K, which the weights fix; nothing here branches on a symbolic M (no guard).
    wrap_triton(_gated_gemm_kernel)[grid](
        x2, w_gate, w_up, b_gate if has_bias else x2, b_up if has_bias else x2, out, m, n, k,
        ACT=ACT_CODES[act], HAS_BIAS=has_bias, EVEN_K=k % block_k == 0, BLOCK_M=block_m, BLOCK_N=block_n,
        BLOCK_K=block_k, GROUP_M=group_m, INTERPRET=interpreting(), num_warps=num_warps, num_stages=num_stages)
    return out.view(*x.shape[:-1], n)


def gated_gemm(x, w_gate, w_up, act="silu", bias_gate=None, bias_up=None, config=None):
    """act(F.linear(x, w_gate, bias_gate)) * F.linear(x, w_up, bias_up) for x [..., K], weights [I, K]; returns
    [..., I] in x's dtype. `config` = (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages) overrides
    `_config`. Biases: both or neither."""
    if (bias_gate is None) != (bias_up is None):
        raise ValueError("gated_gemm: pass both biases or neither")
    return _launch(x, w_gate, w_up, bias_gate, bias_up, act, config)


def gated_gemm_fused(x, w_gate_up, act="silu", gate_first=True, bias=None, config=None):
    """The same with one fused weight [2I, K] (and bias [2I]): `g, u = F.linear(x, w_gate_up, bias).chunk(2, -1)`
    with gate_first=True (else `u, g = ...`), then act(g) * u."""
    i = w_gate_up.shape[0] // 2
    if w_gate_up.shape[0] != 2 * i:
        raise ValueError(f"gated_gemm_fused: the fused weight needs an even row count, got {tuple(w_gate_up.shape)}")
    first, second = (0, 1) if gate_first else (1, 0)
    halves = w_gate_up[:i], w_gate_up[i:]
    b = (bias[:i], bias[i:]) if bias is not None else (None, None)
    return _launch(x, halves[first], halves[second], b[first], b[second], act, config)
