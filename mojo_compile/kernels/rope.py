"""Triton rotary-embedding kernels: RoPE on q and k in one launch (forward and backward), and QK-norm (RMSNorm of each
head, or of all heads of a token) fused with RoPE, forward and backward. Launchers at the bottom.

Layout: q is [B, S, Hq, D] (seq_dim=1) or [B, Hq, S, D] (seq_dim=2) with any strides, k likewise with Hkv heads; the
kernels take the strides, nothing is copied. cos/sin are [B or 1, S, R] or [S, R], any strides (an expanded batch has
stride 0). A program owns BLOCK_T tokens (flattened b*S + s) and all q and k heads of them, as 3-D tiles
[BLOCK_T, BLOCK_H, BLOCK_D]: cos/sin are loaded once per token and shared by every head. Heads beyond BLOCK_H are
looped over; head counts and D need not be powers of 2 (masks).

The rotation needs each column's partner (i +- R/2, or i ^ 1 when interleaved). Rotate-half over the whole head (the
common case) loads the two halves as two tiles, each the other's partner (the HALVES kernels: every value is loaded
and normalised once). Otherwise, rather than shuffling registers, the partner values are loaded a second time with
permuted column offsets (the same cache lines, so the second read is an L1 hit); that keeps one code path for
interleaved pairs, partial rotary and the interpreter.

Numerics: all math is fp32 on values loaded and cast at once (also what keeps TRITON_INTERPRET=1 right, whose bf16
arithmetic is wrong). The forward reproduces the roundings of the eager spelling `q * cos + rotate_half(q) * sin` in
the output dtype promote(q, cos): each product is rounded, then the sum -- y = rnd(rnd(x*c) + rnd(+-x_partner*s)).
Products of two bf16/fp16 values are exact in fp32, so rounding them once to the output dtype is what torch does;
fp contraction into FMAs is switched off (enable_fp_fusion=False) so an fp32 output is bit-exact as well. With an
explicit out_dtype the rotation is computed in fp32 and then cast (OLMo's `.to(q_type)` with fp32 cos, Cohere). The
backwards compute fp32 and round once, on store. The QK-norm numerics are those of mojo rms_norm ("normed" /
"output" cast modes, see ops/rms_norm.py); the normalised value is rounded to its eager dtype before the rotation.

The fused backward is deterministic: each program writes its own fp32 partial of the weight gradient, summed by torch
afterwards -- no atomics.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import CAST_CODES, TRITON_ASCEND, device_caps, interpreting, normalise, round_to, wrap_triton, writes

__all__ = ["qk_norm_rope_bwd", "qk_norm_rope_fwd", "rope_bwd", "rope_fwd"]


# ----------------------------------------------------------------------------------------------------------- helpers
@triton.jit
def _columns(R: tl.constexpr, ROT_START: tl.constexpr, INTERLEAVED: tl.constexpr, BLOCK_D: tl.constexpr):
    """Per column d of a head: whether it rotates, its cos/sin index j and its partner's jp (0 where it does not
    rotate, so every load stays in bounds), the partner column, and the sign of the partner's term in the forward."""
    d = tl.arange(0, BLOCK_D)
    j = d - ROT_START
    rot = (j >= 0) & (j < R)
    if INTERLEAVED:  # pairs (2i, 2i+1)
        first = (j & 1) == 0
        jp = j ^ 1
    else:  # halves (i, i + R/2)
        first = j < R // 2
        jp = tl.where(first, j + R // 2, j - R // 2)
    j = tl.where(rot, j, 0)
    jp = tl.where(rot, jp, 0)
    partner = tl.where(rot, jp + ROT_START, d)
    sign = tl.where(first, -1.0, 1.0)
    return d, rot[None, None, :], j, jp, partner, sign[None, None, :]


@triton.jit
def _tokens(start, T, S, BLOCK_T: tl.constexpr):
    tok = (start + tl.arange(0, BLOCK_T)).to(tl.int64)
    return tok, tok < T, tok // S, tok % S


@triton.jit
def _load_row(C, b, s, j, tok_ok, rot, scb, scs, scd):
    """The cos (or sin) value of column index j for each token, fp32, as [BLOCK_T, 1, BLOCK_D] (0 where the column
    does not rotate: nothing is read there, and a rotary_dim of 0 reads nothing at all)."""
    offs = (b * scb + s * scs)[:, None, None] + j[None, None, :] * scd
    return tl.load(C + offs, mask=tok_ok[:, None, None] & rot, other=0.0).to(tl.float32)


@triton.jit
def _rotate(x, xp, c, s, rot, sign, DTYPE: tl.constexpr, ROUND_TERMS: tl.constexpr, INTERPRET: tl.constexpr):
    """x*c + sign*xp*s where rot, else x; rounded to DTYPE, with each product rounded first if ROUND_TERMS (eager)."""
    a = x * c
    b = (sign * xp) * s  # sign*xp is exact: the negation in rotate_half
    if ROUND_TERMS:
        a = round_to(a, DTYPE, INTERPRET).to(tl.float32)
        b = round_to(b, DTYPE, INTERPRET).to(tl.float32)
    return round_to(tl.where(rot, a + b, x), DTYPE, INTERPRET)


@triton.jit
def _half_columns(R: tl.constexpr, BLOCK_R: tl.constexpr):
    """The HALVES layout (rotate-half over the whole head, R == D): column j of the low half pairs with R/2 + j, so
    a tile of each half is loaded once and each is the other's partner -- no second load, no work done twice.
    Returns j and the in-half mask. (Kept apart from _halves: j addresses the stores, and torch's write analysis
    counts every pointer argument of a call as feeding its results -- kernels/common.py.)"""
    j = tl.arange(0, BLOCK_R)
    return j, (j < R // 2)[None, None, :]


@triton.jit
def _halves(C, SN, b, s, j, in_half, tok_ok, scb, scs, scd, ssb, sss, ssd, R: tl.constexpr):
    """cos / sin of both halves (see _half_columns), fp32, [BLOCK_T, 1, BLOCK_R]."""
    c_lo = _load_row(C, b, s, j, tok_ok, in_half, scb, scs, scd)
    c_hi = _load_row(C, b, s, j + R // 2, tok_ok, in_half, scb, scs, scd)
    s_lo = _load_row(SN, b, s, j, tok_ok, in_half, ssb, sss, ssd)
    s_hi = _load_row(SN, b, s, j + R // 2, tok_ok, in_half, ssb, sss, ssd)
    return c_lo, c_hi, s_lo, s_hi


@triton.jit
def _rotate_eager(x, xp, c, s, rot, sign, OUT_DTYPE: tl.constexpr, COMPUTE_FP32: tl.constexpr,
                  INTERPRET: tl.constexpr):
    """The forward's roundings: in the output dtype, or in fp32 then cast (`(q * cos + ...).to(q.dtype)` with fp32
    cos, OLMo; Cohere's `q.float()` is the same with cos cast to fp32)."""
    if COMPUTE_FP32:
        y = _rotate(x, xp, c, s, rot, sign, tl.float32, True, INTERPRET)
        return round_to(y, OUT_DTYPE, INTERPRET)
    return _rotate(x, xp, c, s, rot, sign, OUT_DTYPE, True, INTERPRET)


@triton.jit
def _head_tile(base, h0, tok_ok, sh, H: tl.constexpr, D: tl.constexpr, BLOCK_H: tl.constexpr,
               BLOCK_D: tl.constexpr):
    """Offsets of the token rows plus heads [h0, h0 + BLOCK_H) ([BLOCK_T, BLOCK_H, 1], int64) and the tile mask."""
    h = h0 + tl.arange(0, BLOCK_H)
    d = tl.arange(0, BLOCK_D)
    mask = tok_ok[:, None, None] & (h < H)[None, :, None] & (d < D)[None, None, :]
    return base[:, None, None] + h.to(tl.int64)[None, :, None] * sh, h, mask


# ------------------------------------------------------------------------------------------------ rope fwd and bwd
@triton.jit
def _rope_heads(X, Y, x_base, y_base, tok_ok, sxh, sxd, syh, c, s, d, partner, rot, sign,
                H: tl.constexpr, D: tl.constexpr, BACKWARD: tl.constexpr, COMPUTE_FP32: tl.constexpr,
                BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, INTERPRET: tl.constexpr):
    for h0 in range(0, H, BLOCK_H):
        xo, _, mask = _head_tile(x_base, h0, tok_ok, sxh, H, D, BLOCK_H, BLOCK_D)
        x = tl.load(X + xo + d[None, None, :] * sxd, mask=mask, other=0.0).to(tl.float32)
        xp = tl.load(X + xo + partner[None, None, :] * sxd, mask=mask, other=0.0).to(tl.float32)
        if BACKWARD:  # fp32, one rounding
            y = _rotate(x, xp, c, s, rot, sign, Y.dtype.element_ty, False, INTERPRET)
        else:
            y = _rotate_eager(x, xp, c, s, rot, sign, Y.dtype.element_ty, COMPUTE_FP32, INTERPRET)
        yo, _, _ = _head_tile(y_base, h0, tok_ok, syh, H, D, BLOCK_H, BLOCK_D)
        tl.store(Y + yo + d[None, None, :], y, mask=mask)


@triton.jit
def _rope_heads_halves(X, Y, x_base, y_base, tok_ok, sxh, sxd, syh, c_lo, c_hi, s_lo, s_hi, j, in_half, sign_lo,
                       H: tl.constexpr, R: tl.constexpr, BACKWARD: tl.constexpr, COMPUTE_FP32: tl.constexpr,
                       BLOCK_H: tl.constexpr, BLOCK_R: tl.constexpr, INTERPRET: tl.constexpr):
    """_rope_heads for the HALVES layout: y_lo = x_lo*c_lo + sign_lo*x_hi*s_lo, y_hi = x_hi*c_hi - sign_lo*x_lo*s_hi."""
    HALF: tl.constexpr = R // 2
    for h0 in range(0, H, BLOCK_H):
        xo, _, mask = _head_tile(x_base, h0, tok_ok, sxh, H, HALF, BLOCK_H, BLOCK_R)
        x_lo = tl.load(X + xo + j[None, None, :] * sxd, mask=mask, other=0.0).to(tl.float32)
        x_hi = tl.load(X + xo + (j + HALF)[None, None, :] * sxd, mask=mask, other=0.0).to(tl.float32)
        if BACKWARD:
            y_lo = _rotate(x_lo, x_hi, c_lo, s_lo, in_half, sign_lo, Y.dtype.element_ty, False, INTERPRET)
            y_hi = _rotate(x_hi, x_lo, c_hi, s_hi, in_half, -sign_lo, Y.dtype.element_ty, False, INTERPRET)
        else:
            y_lo = _rotate_eager(x_lo, x_hi, c_lo, s_lo, in_half, sign_lo, Y.dtype.element_ty, COMPUTE_FP32,
                                 INTERPRET)
            y_hi = _rotate_eager(x_hi, x_lo, c_hi, s_hi, in_half, -sign_lo, Y.dtype.element_ty, COMPUTE_FP32,
                                 INTERPRET)
        yo, _, _ = _head_tile(y_base, h0, tok_ok, syh, H, HALF, BLOCK_H, BLOCK_R)
        tl.store(Y + yo + j[None, None, :], y_lo, mask=mask)
        tl.store(Y + yo + (j + HALF)[None, None, :], y_hi, mask=mask)


@writes("QO", "KO")
@triton.jit
def _rope_kernel(Q, K, QO, KO, C, SN, T, S,
                 sqb, sqs, sqh, sqd, skb, sks, skh, skd, sob, sos, soh, spb, sps, sph,
                 scb, scs, scd, ssb, sss, ssd,
                 HQ: tl.constexpr, HK: tl.constexpr, D: tl.constexpr, R: tl.constexpr, ROT_START: tl.constexpr,
                 INTERLEAVED: tl.constexpr, BACKWARD: tl.constexpr, COMPUTE_FP32: tl.constexpr,
                 HALVES: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr,
                 BLOCK_D: tl.constexpr, INTERPRET: tl.constexpr, PERSISTENT: tl.constexpr):
    """Forward: y = rot(x). BACKWARD: the transpose, dx[d] = dy[d]*c[j] - sign*dy[partner]*s[jp] (fp32, one rounding).
    (sob, sos, soh) are QO's strides, (spb, sps, sph) KO's; their last stride is 1. HALVES: see _half_columns
    (BLOCK_D is then the half's block)."""
    if PERSISTENT:  # one program per core, each taking every num_programs-th token block
        for block in range(tl.program_id(0), tl.cdiv(T, BLOCK_T), tl.num_programs(0)):
            _rope_block(block, Q, K, QO, KO, C, SN, T, S, sqb, sqs, sqh, sqd, skb, sks, skh, skd, sob, sos, soh, spb,
                        sps, sph, scb, scs, scd, ssb, sss, ssd, HQ, HK, D, R, ROT_START, INTERLEAVED, BACKWARD,
                        COMPUTE_FP32, HALVES, BLOCK_T, BLOCK_HQ, BLOCK_HK, BLOCK_D, INTERPRET)
    else:
        _rope_block(tl.program_id(0), Q, K, QO, KO, C, SN, T, S, sqb, sqs, sqh, sqd, skb, sks, skh, skd, sob, sos,
                    soh, spb, sps, sph, scb, scs, scd, ssb, sss, ssd, HQ, HK, D, R, ROT_START, INTERLEAVED,
                    BACKWARD, COMPUTE_FP32, HALVES, BLOCK_T, BLOCK_HQ, BLOCK_HK, BLOCK_D, INTERPRET)


@triton.jit
def _rope_block(block, Q, K, QO, KO, C, SN, T, S,
                sqb, sqs, sqh, sqd, skb, sks, skh, skd, sob, sos, soh, spb, sps, sph,
                scb, scs, scd, ssb, sss, ssd,
                HQ: tl.constexpr, HK: tl.constexpr, D: tl.constexpr, R: tl.constexpr, ROT_START: tl.constexpr,
                INTERLEAVED: tl.constexpr, BACKWARD: tl.constexpr, COMPUTE_FP32: tl.constexpr,
                HALVES: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr,
                BLOCK_D: tl.constexpr, INTERPRET: tl.constexpr):
    _, tok_ok, b, s_idx = _tokens(block * BLOCK_T, T, S, BLOCK_T)
    if HALVES:
        j, in_half = _half_columns(R, BLOCK_D)
        c_lo, c_hi, s_lo, s_hi = _halves(C, SN, b, s_idx, j, in_half, tok_ok, scb, scs, scd, ssb, sss, ssd, R)
        if BACKWARD:  # dx_lo = dy_lo*c_lo + dy_hi*s_hi, dx_hi = dy_hi*c_hi - dy_lo*s_lo
            s_lo, s_hi = s_hi, s_lo
            sign_lo = 1.0
        else:
            sign_lo = -1.0
        _rope_heads_halves(Q, QO, b * sqb + s_idx * sqs, b * sob + s_idx * sos, tok_ok, sqh, sqd, soh,
                           c_lo, c_hi, s_lo, s_hi, j, in_half, sign_lo, HQ, R, BACKWARD, COMPUTE_FP32, BLOCK_HQ,
                           BLOCK_D, INTERPRET)
        _rope_heads_halves(K, KO, b * skb + s_idx * sks, b * spb + s_idx * sps, tok_ok, skh, skd, sph,
                           c_lo, c_hi, s_lo, s_hi, j, in_half, sign_lo, HK, R, BACKWARD, COMPUTE_FP32, BLOCK_HK,
                           BLOCK_D, INTERPRET)
    else:
        d, rot, j, jp, partner, sign = _columns(R, ROT_START, INTERLEAVED, BLOCK_D)
        c = _load_row(C, b, s_idx, j, tok_ok, rot, scb, scs, scd)
        if BACKWARD:
            s = _load_row(SN, b, s_idx, jp, tok_ok, rot, ssb, sss, ssd)
            sign = -sign
        else:
            s = _load_row(SN, b, s_idx, j, tok_ok, rot, ssb, sss, ssd)
        _rope_heads(Q, QO, b * sqb + s_idx * sqs, b * sob + s_idx * sos, tok_ok, sqh, sqd, soh, c, s, d, partner,
                    rot, sign, HQ, D, BACKWARD, COMPUTE_FP32, BLOCK_HQ, BLOCK_D, INTERPRET)
        _rope_heads(K, KO, b * skb + s_idx * sks, b * spb + s_idx * sps, tok_ok, skh, skd, sph, c, s, d, partner,
                    rot, sign, HK, D, BACKWARD, COMPUTE_FP32, BLOCK_HK, BLOCK_D, INTERPRET)


# --------------------------------------------------------------------------------------------- qk-norm + rope fwd
@triton.jit
def _rstd_of(x_sq, eps, N: tl.constexpr, TOGETHER: tl.constexpr):
    """1/rms of each head ([BLOCK_T, BLOCK_H]) or of each token's whole tile ([BLOCK_T, 1]), from the squares."""
    ss = tl.sum(x_sq, axis=2)
    if TOGETHER:
        ss = tl.sum(ss, axis=1)[:, None]
    return tl.math.rsqrt(ss / N + eps)


@triton.jit
def _store_rstd(RSTD, x_sq, eps, tok, tok_ok, h, N: tl.constexpr, H: tl.constexpr, TOGETHER: tl.constexpr):
    """rstd of the tile, stored ([B, S] when TOGETHER, else [B, S, H]); returned as [BLOCK_T, BLOCK_H or 1, 1]."""
    rstd = _rstd_of(x_sq, eps, N, TOGETHER)
    if TOGETHER:
        tl.store(RSTD + tok[:, None], rstd, mask=tok_ok[:, None])
    else:
        tl.store(RSTD + tok[:, None] * H + h[None, :], rstd, mask=tok_ok[:, None] & (h < H)[None, :])
    return rstd[:, :, None]


@triton.jit
def _norm_rope_fwd_heads(X, Y, W, RSTD, tok, x_base, y_base, tok_ok, sxh, sxd, syh, c, s, d, partner, rot, sign,
                         eps, weight_offset, H: tl.constexpr, D: tl.constexpr, TOGETHER: tl.constexpr,
                         CAST: tl.constexpr, NORM_FP32: tl.constexpr, COMPUTE_FP32: tl.constexpr,
                         BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, INTERPRET: tl.constexpr):
    IN_DTYPE: tl.constexpr = X.dtype.element_ty
    NORM_DTYPE: tl.constexpr = tl.float32 if NORM_FP32 else X.dtype.element_ty  # the eager norm's output dtype
    for h0 in range(0, H, BLOCK_H):  # one iteration when TOGETHER (BLOCK_H >= H)
        xo, h, mask = _head_tile(x_base, h0, tok_ok, sxh, H, D, BLOCK_H, BLOCK_D)
        x = tl.load(X + xo + d[None, None, :] * sxd, mask=mask, other=0.0).to(tl.float32)
        xp = tl.load(X + xo + partner[None, None, :] * sxd, mask=mask, other=0.0).to(tl.float32)
        # one weight row for all heads unless TOGETHER. triton-ascend does not broadcast a pointer to a wider mask:
        # there the mask keeps the pointer's shape (NVIDIA keeps its code, which broadcasts)
        w_row = h[None, :, None] * D if TOGETHER else 0
        w_ok = (h < H)[None, :, None] & (d < D)[None, None, :]
        if TRITON_ASCEND:
            if not TOGETHER:
                w_ok = (d < D)[None, None, :]
        w = tl.load(W + w_row + d[None, None, :], mask=w_ok, other=0.0).to(tl.float32)
        wp = tl.load(W + w_row + partner[None, None, :], mask=w_ok, other=0.0).to(tl.float32)
        rstd = _store_rstd(RSTD, x * x, eps, tok, tok_ok, h, H * D if TOGETHER else D, H, TOGETHER)
        # The partner shares the head (and so the rstd); both are normalised exactly like the eager norm's output.
        n = round_to(normalise(x, rstd, w, weight_offset, IN_DTYPE, True, CAST, INTERPRET), NORM_DTYPE, INTERPRET)
        n_p = round_to(normalise(xp, rstd, wp, weight_offset, IN_DTYPE, True, CAST, INTERPRET), NORM_DTYPE, INTERPRET)
        y = _rotate_eager(n.to(tl.float32), n_p.to(tl.float32), c, s, rot, sign, Y.dtype.element_ty, COMPUTE_FP32,
                          INTERPRET)
        yo, _, _ = _head_tile(y_base, h0, tok_ok, syh, H, D, BLOCK_H, BLOCK_D)
        tl.store(Y + yo + d[None, None, :], y, mask=mask)


@triton.jit
def _norm_rope_fwd_heads_halves(X, Y, W, RSTD, tok, x_base, y_base, tok_ok, sxh, sxd, syh, c_lo, c_hi, s_lo, s_hi, j,
                                in_half, eps, weight_offset, H: tl.constexpr, D: tl.constexpr,
                                TOGETHER: tl.constexpr, CAST: tl.constexpr, NORM_FP32: tl.constexpr,
                                COMPUTE_FP32: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_R: tl.constexpr,
                                INTERPRET: tl.constexpr):
    """_norm_rope_fwd_heads for the HALVES layout (R == D): each half is loaded and normalised once."""
    IN_DTYPE: tl.constexpr = X.dtype.element_ty
    NORM_DTYPE: tl.constexpr = tl.float32 if NORM_FP32 else X.dtype.element_ty
    HALF: tl.constexpr = D // 2
    lo = j[None, None, :]
    for h0 in range(0, H, BLOCK_H):
        xo, h, mask = _head_tile(x_base, h0, tok_ok, sxh, H, HALF, BLOCK_H, BLOCK_R)
        x_lo = tl.load(X + xo + lo * sxd, mask=mask, other=0.0).to(tl.float32)
        x_hi = tl.load(X + xo + (lo + HALF) * sxd, mask=mask, other=0.0).to(tl.float32)
        w_row = h[None, :, None] * D if TOGETHER else 0
        w_ok = (h < H)[None, :, None] & in_half
        if TRITON_ASCEND:  # (see above)
            if not TOGETHER:
                w_ok = in_half
        w_lo = tl.load(W + w_row + lo, mask=w_ok, other=0.0).to(tl.float32)
        w_hi = tl.load(W + w_row + lo + HALF, mask=w_ok, other=0.0).to(tl.float32)
        rstd = _store_rstd(RSTD, x_lo * x_lo + x_hi * x_hi, eps, tok, tok_ok, h, H * D if TOGETHER else D, H,
                           TOGETHER)
        n_lo = round_to(normalise(x_lo, rstd, w_lo, weight_offset, IN_DTYPE, True, CAST, INTERPRET), NORM_DTYPE,
                      INTERPRET).to(tl.float32)
        n_hi = round_to(normalise(x_hi, rstd, w_hi, weight_offset, IN_DTYPE, True, CAST, INTERPRET), NORM_DTYPE,
                      INTERPRET).to(tl.float32)
        y_lo = _rotate_eager(n_lo, n_hi, c_lo, s_lo, in_half, -1.0, Y.dtype.element_ty, COMPUTE_FP32, INTERPRET)
        y_hi = _rotate_eager(n_hi, n_lo, c_hi, s_hi, in_half, 1.0, Y.dtype.element_ty, COMPUTE_FP32, INTERPRET)
        yo, _, _ = _head_tile(y_base, h0, tok_ok, syh, H, HALF, BLOCK_H, BLOCK_R)
        tl.store(Y + yo + lo, y_lo, mask=mask)
        tl.store(Y + yo + lo + HALF, y_hi, mask=mask)


@writes("QO", "KO", "RQ", "RK")
@triton.jit
def _norm_rope_fwd_kernel(Q, K, QO, KO, WQ, WK, RQ, RK, C, SN, T, S, eps, weight_offset,
                          sqb, sqs, sqh, sqd, skb, sks, skh, skd, sob, sos, soh, spb, sps, sph,
                          scb, scs, scd, ssb, sss, ssd,
                          HQ: tl.constexpr, HK: tl.constexpr, D: tl.constexpr, R: tl.constexpr,
                          ROT_START: tl.constexpr, INTERLEAVED: tl.constexpr, TOGETHER: tl.constexpr,
                          CAST: tl.constexpr, Q_NORM_FP32: tl.constexpr, K_NORM_FP32: tl.constexpr,
                          Q_COMPUTE_FP32: tl.constexpr, K_COMPUTE_FP32: tl.constexpr, HALVES: tl.constexpr,
                          BLOCK_T: tl.constexpr, BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr,
                          BLOCK_D: tl.constexpr, INTERPRET: tl.constexpr, PERSISTENT: tl.constexpr):
    """HALVES: see _half_columns (BLOCK_D is then the half's block)."""
    if PERSISTENT:  # one program per core, each taking every num_programs-th token block
        for block in range(tl.program_id(0), tl.cdiv(T, BLOCK_T), tl.num_programs(0)):
            _norm_rope_fwd_block(block, Q, K, QO, KO, WQ, WK, RQ, RK, C, SN, T, S, eps, weight_offset, sqb, sqs, sqh,
                                 sqd, skb, sks, skh, skd, sob, sos, soh, spb, sps, sph, scb, scs, scd, ssb, sss, ssd,
                                 HQ, HK, D, R, ROT_START, INTERLEAVED, TOGETHER, CAST, Q_NORM_FP32, K_NORM_FP32,
                                 Q_COMPUTE_FP32, K_COMPUTE_FP32, HALVES, BLOCK_T, BLOCK_HQ, BLOCK_HK, BLOCK_D,
                                 INTERPRET)
    else:
        _norm_rope_fwd_block(tl.program_id(0), Q, K, QO, KO, WQ, WK, RQ, RK, C, SN, T, S, eps, weight_offset, sqb,
                             sqs, sqh, sqd, skb, sks, skh, skd, sob, sos, soh, spb, sps, sph, scb, scs, scd, ssb,
                             sss, ssd, HQ, HK, D, R, ROT_START, INTERLEAVED, TOGETHER, CAST, Q_NORM_FP32,
                             K_NORM_FP32, Q_COMPUTE_FP32, K_COMPUTE_FP32, HALVES, BLOCK_T, BLOCK_HQ, BLOCK_HK,
                             BLOCK_D, INTERPRET)


@triton.jit
def _norm_rope_fwd_block(block, Q, K, QO, KO, WQ, WK, RQ, RK, C, SN, T, S, eps, weight_offset,
                         sqb, sqs, sqh, sqd, skb, sks, skh, skd, sob, sos, soh, spb, sps, sph,
                         scb, scs, scd, ssb, sss, ssd,
                         HQ: tl.constexpr, HK: tl.constexpr, D: tl.constexpr, R: tl.constexpr,
                         ROT_START: tl.constexpr, INTERLEAVED: tl.constexpr, TOGETHER: tl.constexpr,
                         CAST: tl.constexpr, Q_NORM_FP32: tl.constexpr, K_NORM_FP32: tl.constexpr,
                         Q_COMPUTE_FP32: tl.constexpr, K_COMPUTE_FP32: tl.constexpr, HALVES: tl.constexpr,
                         BLOCK_T: tl.constexpr, BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr,
                         BLOCK_D: tl.constexpr, INTERPRET: tl.constexpr):
    eps = tl.cast(eps, tl.float32)
    weight_offset = tl.cast(weight_offset, tl.float32)
    tok, tok_ok, b, s_idx = _tokens(block * BLOCK_T, T, S, BLOCK_T)
    if HALVES:
        j, in_half = _half_columns(R, BLOCK_D)
        c_lo, c_hi, s_lo, s_hi = _halves(C, SN, b, s_idx, j, in_half, tok_ok, scb, scs, scd, ssb, sss, ssd, R)
        _norm_rope_fwd_heads_halves(Q, QO, WQ, RQ, tok, b * sqb + s_idx * sqs, b * sob + s_idx * sos, tok_ok, sqh,
                                    sqd, soh, c_lo, c_hi, s_lo, s_hi, j, in_half, eps, weight_offset, HQ, D,
                                    TOGETHER, CAST, Q_NORM_FP32, Q_COMPUTE_FP32, BLOCK_HQ, BLOCK_D, INTERPRET)
        _norm_rope_fwd_heads_halves(K, KO, WK, RK, tok, b * skb + s_idx * sks, b * spb + s_idx * sps, tok_ok, skh,
                                    skd, sph, c_lo, c_hi, s_lo, s_hi, j, in_half, eps, weight_offset, HK, D,
                                    TOGETHER, CAST, K_NORM_FP32, K_COMPUTE_FP32, BLOCK_HK, BLOCK_D, INTERPRET)
    else:
        d, rot, j, _, partner, sign = _columns(R, ROT_START, INTERLEAVED, BLOCK_D)
        c = _load_row(C, b, s_idx, j, tok_ok, rot, scb, scs, scd)
        s = _load_row(SN, b, s_idx, j, tok_ok, rot, ssb, sss, ssd)
        _norm_rope_fwd_heads(Q, QO, WQ, RQ, tok, b * sqb + s_idx * sqs, b * sob + s_idx * sos, tok_ok, sqh, sqd,
                             soh, c, s, d, partner, rot, sign, eps, weight_offset, HQ, D, TOGETHER, CAST,
                             Q_NORM_FP32, Q_COMPUTE_FP32, BLOCK_HQ, BLOCK_D, INTERPRET)
        _norm_rope_fwd_heads(K, KO, WK, RK, tok, b * skb + s_idx * sks, b * spb + s_idx * sps, tok_ok, skh, skd,
                             sph, c, s, d, partner, rot, sign, eps, weight_offset, HK, D, TOGETHER, CAST,
                             K_NORM_FP32, K_COMPUTE_FP32, BLOCK_HK, BLOCK_D, INTERPRET)


# -------------------------------------------------------------------------------------------- qk-norm + rope bwd
@triton.jit
def _norm_rope_bwd_heads(DY, X, DX, W, RSTD, acc, tok, dy_base, x_base, dx_base, tok_ok, sdyh, sdyd, sxh, sxd, sdxh,
                         c, s, d, partner, rot, sign, weight_offset, H: tl.constexpr, D: tl.constexpr,
                         TOGETHER: tl.constexpr, CAST: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
                         INTERPRET: tl.constexpr):
    """dx of one tensor for a block of tokens; returns acc ([BLOCK_H, BLOCK_D]) plus this block's weight-grad terms."""
    N: tl.constexpr = H * D if TOGETHER else D
    for h0 in range(0, H, BLOCK_H):
        dyo, h, mask = _head_tile(dy_base, h0, tok_ok, sdyh, H, D, BLOCK_H, BLOCK_D)
        dy = tl.load(DY + dyo + d[None, None, :] * sdyd, mask=mask, other=0.0).to(tl.float32)
        dyp = tl.load(DY + dyo + partner[None, None, :] * sdyd, mask=mask, other=0.0).to(tl.float32)
        g = _rotate(dy, dyp, c, s, rot, sign, tl.float32, False, INTERPRET)  # the gradient reaching the norm's output
        xo, _, _ = _head_tile(x_base, h0, tok_ok, sxh, H, D, BLOCK_H, BLOCK_D)
        x = tl.load(X + xo + d[None, None, :] * sxd, mask=mask, other=0.0).to(tl.float32)
        w_row = h[None, :, None] * D if TOGETHER else 0
        w_ok = (h < H)[None, :, None] & (d < D)[None, None, :]
        if TRITON_ASCEND:
            if not TOGETHER:
                w_ok = (d < D)[None, None, :]
        w = tl.load(W + w_row + d[None, None, :], mask=w_ok, other=0.0).to(tl.float32) + weight_offset
        if TOGETHER:
            rstd = tl.load(RSTD + tok, mask=tok_ok, other=0.0)[:, None, None]
        else:
            rstd = tl.load(RSTD + tok[:, None] * H + h[None, :], mask=tok_ok[:, None] & (h < H)[None, :],
                           other=0.0)[:, :, None]
        n = x * rstd
        dn = g * w
        dot = tl.sum(dn * n, axis=2)
        if TOGETHER:
            dot = tl.sum(dot, axis=1)[:, None]
        dx = (dn - n * (dot / N)[:, :, None]) * rstd
        dxo, _, _ = _head_tile(dx_base, h0, tok_ok, sdxh, H, D, BLOCK_H, BLOCK_D)
        tl.store(DX + dxo + d[None, None, :], round_to(dx, DX.dtype.element_ty, INTERPRET), mask=mask)
        n_seen = round_to(n, X.dtype.element_ty, INTERPRET).to(tl.float32) if CAST == 0 else n  # what w multiplied
        acc += tl.sum(g * n_seen, axis=0)
    return acc


@triton.jit
def _store_dw(DW, acc, pid, H: tl.constexpr, D: tl.constexpr, TOGETHER: tl.constexpr, BLOCK_H: tl.constexpr,
              BLOCK_D: tl.constexpr):
    d = tl.arange(0, BLOCK_D)
    if TOGETHER:  # weight [H * D]
        h = tl.arange(0, BLOCK_H)
        tl.store(DW + pid.to(tl.int64) * (H * D) + h[:, None] * D + d[None, :], acc,
                 mask=(h < H)[:, None] & (d < D)[None, :])
    else:  # weight [D], shared by the heads
        tl.store(DW + pid.to(tl.int64) * D + d, tl.sum(acc, axis=0), mask=d < D)


@writes("DQ", "DK", "DWQ", "DWK")
@triton.jit
def _norm_rope_bwd_kernel(DQ_OUT, DK_OUT, Q, K, DQ, DK, WQ, WK, RQ, RK, DWQ, DWK, C, SN, T, S, tokens_per_program,
                          weight_offset,
                          sgqb, sgqs, sgqh, sgqd, sgkb, sgks, sgkh, sgkd, sqb, sqs, sqh, sqd, skb, sks, skh, skd,
                          sob, sos, soh, spb, sps, sph, scb, scs, scd, ssb, sss, ssd,
                          HQ: tl.constexpr, HK: tl.constexpr, D: tl.constexpr, R: tl.constexpr,
                          ROT_START: tl.constexpr, INTERLEAVED: tl.constexpr, TOGETHER: tl.constexpr,
                          CAST: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr,
                          BLOCK_D: tl.constexpr, INTERPRET: tl.constexpr):
    """RoPE backward then RMSNorm backward, one pass. (sob, sos, soh) are DQ's strides, (spb, sps, sph) DK's."""
    weight_offset = tl.cast(weight_offset, tl.float32)
    pid = tl.program_id(0)
    d, rot, j, jp, partner, sign = _columns(R, ROT_START, INTERLEAVED, BLOCK_D)
    acc_q = tl.zeros([BLOCK_HQ, BLOCK_D], dtype=tl.float32)
    acc_k = tl.zeros([BLOCK_HK, BLOCK_D], dtype=tl.float32)
    for i in range(0, tokens_per_program, BLOCK_T):
        tok, tok_ok, b, s_idx = _tokens(pid.to(tl.int64) * tokens_per_program + i, T, S, BLOCK_T)
        c = _load_row(C, b, s_idx, j, tok_ok, rot, scb, scs, scd)
        s = _load_row(SN, b, s_idx, jp, tok_ok, rot, ssb, sss, ssd)
        acc_q = _norm_rope_bwd_heads(DQ_OUT, Q, DQ, WQ, RQ, acc_q, tok, b * sgqb + s_idx * sgqs, b * sqb + s_idx * sqs,
                                     b * sob + s_idx * sos, tok_ok, sgqh, sgqd, sqh, sqd, soh, c, s, d, partner, rot,
                                     -sign, weight_offset, HQ, D, TOGETHER, CAST, BLOCK_HQ, BLOCK_D, INTERPRET)
        acc_k = _norm_rope_bwd_heads(DK_OUT, K, DK, WK, RK, acc_k, tok, b * sgkb + s_idx * sgks, b * skb + s_idx * sks,
                                     b * spb + s_idx * sps, tok_ok, sgkh, sgkd, skh, skd, sph, c, s, d, partner, rot,
                                     -sign, weight_offset, HK, D, TOGETHER, CAST, BLOCK_HK, BLOCK_D, INTERPRET)
    _store_dw(DWQ, acc_q, pid, HQ, D, TOGETHER, BLOCK_HQ, BLOCK_D)
    _store_dw(DWK, acc_k, pid, HK, D, TOGETHER, BLOCK_HK, BLOCK_D)


# --------------------------------------------------------------------------------------------------------- launchers
def _bshd(t: torch.Tensor, seq_dim: int) -> torch.Tensor:
    """The [B, S, H, D] view of a q/k-like tensor (a transpose of BHSD; no copy)."""
    if t.dim() != 4 or seq_dim not in (1, 2):
        raise ValueError(f"mojo rope: expected a 4-D q/k with seq_dim 1 or 2, got {tuple(t.shape)}, seq_dim={seq_dim}")
    return t if seq_dim == 1 else t.transpose(1, 2)


def _cos_sin(cos, sin, batch, seq, rotary_dim):
    """cos/sin as [B, S, R] views (stride 0 where broadcast), whatever of [S, R], [1, S, R], [B, S, R] came in."""
    # Only static properties are checked (no guards on B/S when they are symbolic); expand rejects a wrong B/S.
    if cos.dtype != sin.dtype or cos.dim() != sin.dim():
        raise ValueError(f"mojo rope: cos {tuple(cos.shape)} {cos.dtype} and sin {tuple(sin.shape)} {sin.dtype} differ")
    if cos.dim() not in (2, 3) or cos.shape[-1] != rotary_dim or sin.shape[-1] != rotary_dim:
        raise ValueError(f"mojo rope: cos/sin must be [B or 1, S, {rotary_dim}] or [S, {rotary_dim}], "
                         f"got {tuple(cos.shape)}")
    views = [(t if t.dim() == 3 else t.unsqueeze(0)).expand(batch, seq, rotary_dim) for t in (cos, sin)]
    return views[0], views[1]


def _check_rotary(head_dim: int, rotary_dim: int) -> None:
    if rotary_dim % 2 or not 0 <= rotary_dim <= head_dim:
        raise ValueError(f"mojo rope: rotary_dim {rotary_dim} must be even and within the head dim {head_dim}")


def _config(hq: int, hk: int, d: int, together: bool, config=None, gpu_budget: int = 4096):
    """(BLOCK_T, BLOCK_HQ, BLOCK_HK, BLOCK_D, num_warps). A tile holds ~gpu_budget elements on a GPU (a few tokens
    of a small model, one token of a large one, head chunks when one token's heads exceed that), ~64K in the
    interpreter, where each program costs ~1 ms but wide numpy ops are cheap. Swept on an H200 for one shape
    (benchmarks/sweep_mlp_rope.py). `config` = (BLOCK_T, BLOCK_H, num_warps) overrides it; BLOCK_H (a power of 2)
    caps the head chunk, except when the norm spans all heads of a token, which must then share one tile."""
    block_d = triton.next_power_of_2(max(d, 1))
    budget = 65536 if interpreting() else gpu_budget
    block_t, cap, num_warps = config[:3] if config is not None else (None, max(1, budget // block_d), None)
    block_hq, block_hk = (triton.next_power_of_2(max(h, 1)) for h in (hq, hk))
    if not together:
        block_hq, block_hk = min(block_hq, cap), min(block_hk, cap)
    widest = max(block_hq, block_hk) * block_d
    if config is None:
        block_t = max(1, budget // widest)
        num_warps = 4 if widest <= 4096 else 8  # H200, rope fwd, 32 + 8 heads of 128: 4 warps 3.8 TB/s, 8 warps 3.1
    return block_t, block_hq, block_hk, block_d, num_warps


def _use_halves(d: int, rotary_dim: int, interleaved: bool, config) -> bool:
    """The HALVES kernels (see _half_columns) serve rotate-half over the whole head, unless a 4-field config asks for
    the general kernel (the sweep compares the two)."""
    if config is not None and len(config) > 3 and not config[3]:
        return False
    return not interleaved and rotary_dim == d and d > 0


def _strides(t):
    return tuple(t.stride())


def _out_dtype(x_dtype, cos_dtype, out_dtype):
    """(output dtype, COMPUTE_FP32): the eager spelling rounds in promote(x, cos); an explicit out_dtype is a cast
    after that, supported from fp32 (the `.to(q.dtype)` of OLMo / Cohere / ERNIE)."""
    compute = torch.promote_types(x_dtype, cos_dtype)
    if out_dtype is None or out_dtype == compute:
        return compute, False
    if compute != torch.float32:
        raise ValueError(f"mojo rope: a cast to {out_dtype} after computing in {compute} is not supported")
    return out_dtype, True


def _rope(q, k, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last, out_dtypes, compute_fp32, backward, config):
    q4, k4 = _bshd(q, seq_dim), _bshd(k, seq_dim)
    batch, seq, hq, d = q4.shape
    hk = k4.shape[2]
    _check_rotary(d, rotary_dim)
    c3, s3 = _cos_sin(cos, sin, batch, seq, rotary_dim)
    q_out = torch.empty(q.shape, dtype=out_dtypes[0], device=q.device)  # contiguous in the input's logical layout
    k_out = torch.empty(k.shape, dtype=out_dtypes[1], device=k.device)
    qo4, ko4 = _bshd(q_out, seq_dim), _bshd(k_out, seq_dim)
    block_t, block_hq, block_hk, block_d, num_warps = _config(hq, hk, d, False, config)
    halves = _use_halves(d, rotary_dim, interleaved, config)
    tokens = batch * seq
    caps = device_caps(q.device)
    wrap_triton(_rope_kernel)[(caps.programs(triton.cdiv(tokens, block_t)),)](
        q4, k4, qo4, ko4, c3, s3, tokens, seq, *_strides(q4), *_strides(k4), *_strides(qo4)[:3], *_strides(ko4)[:3],
        *_strides(c3), *_strides(s3),
        HQ=hq, HK=hk, D=d, R=rotary_dim, ROT_START=d - rotary_dim if rotate_last else 0, INTERLEAVED=interleaved,
        BACKWARD=backward, COMPUTE_FP32=compute_fp32, HALVES=halves, BLOCK_T=block_t, BLOCK_HQ=block_hq,
        BLOCK_HK=block_hk, BLOCK_D=block_d // 2 if halves else block_d, INTERPRET=interpreting(),
        PERSISTENT=caps.persistent, num_warps=num_warps, enable_fp_fusion=False)
    return q_out, k_out


def rope_fwd(q, k, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last=False, out_dtype=None, config=None):
    """RoPE of q [B, S, Hq, D] / [B, Hq, S, D] (seq_dim 1 / 2) and k (Hkv heads, same layout) in one launch.
    interleaved: pairs (2i, 2i+1) (GPT-J) instead of halves (NeoX). rotate_last: the last rotary_dim dims rotate
    (Mojo Opset) instead of the first (HF). Returns new tensors shaped like q and k, contiguous, of dtype
    promote(q/k, cos), or out_dtype (a cast after an fp32 computation). `config`: see _config."""
    if q.dtype != k.dtype:
        raise ValueError(f"mojo rope: q {q.dtype} and k {k.dtype} must have one dtype")
    dtype, fp32 = _out_dtype(q.dtype, cos.dtype, out_dtype)
    return _rope(q, k, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last, (dtype, dtype), fp32, False, config)


def rope_bwd(grad_q, grad_k, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last=False, dtype=None, config=None):
    """Gradients of rope_fwd w.r.t. q and k (none for cos/sin), of dtype `dtype` (that of q/k; default: the grads')."""
    dtypes = (dtype or grad_q.dtype, dtype or grad_k.dtype)
    return _rope(grad_q, grad_k, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last, dtypes, False, True, config)


def _norm_checks(x4, weight, together, cast):
    if cast not in ("normed", "output"):
        raise ValueError(f"mojo qk_norm_rope: cast must be 'normed' or 'output', got {cast!r}")
    width = x4.shape[2] * x4.shape[3] if together else x4.shape[3]
    if weight.dim() != 1 or weight.shape[0] != width or weight.stride(0) != 1:
        raise ValueError(f"mojo qk_norm_rope: weight {tuple(weight.shape)} is not a contiguous vector of {width}")


def _norm_dtype(x, weight, cast):
    """The eager norm's output dtype (see ops/rms_norm.rms_norm_out_dtype): x's, or fp32 when "normed" promotes."""
    return torch.promote_types(weight.dtype, x.dtype) if cast == "normed" else x.dtype


def _qk_norm_layout(q, k, q_weight, k_weight, cast, cos, sin, rotary_dim, seq_dim, together):
    """The checked [B, S, H, D] views of q and k and the [B, S, R] views of cos / sin, shared by both launchers."""
    q4, k4 = _bshd(q, seq_dim), _bshd(k, seq_dim)
    _check_rotary(q4.shape[3], rotary_dim)
    _norm_checks(q4, q_weight, together, cast)
    _norm_checks(k4, k_weight, together, cast)
    c3, s3 = _cos_sin(cos, sin, q4.shape[0], q4.shape[1], rotary_dim)
    return q4, k4, c3, s3


def qk_norm_rope_fwd(q, k, q_weight, k_weight, eps, cast, cos, sin, rotary_dim, interleaved, seq_dim,
                     norm_heads_together=False, rotate_last=False, weight_offset=0.0, out_dtype=None, config=None):
    """RMSNorm of every head of q and k over D (or over the token's H*D when norm_heads_together, OLMo2), then RoPE,
    in one kernel. Returns (q_out, k_out, q_rstd, k_rstd): outputs shaped like q/k, of dtype promote(norm dtype, cos)
    or out_dtype (as in rope_fwd), rstd fp32 [B, S, H] ([B, S] when together)."""
    q4, k4, c3, s3 = _qk_norm_layout(q, k, q_weight, k_weight, cast, cos, sin, rotary_dim, seq_dim,
                                     norm_heads_together)
    batch, seq, hq, d = q4.shape
    hk = k4.shape[2]
    nq, nk = _norm_dtype(q, q_weight, cast), _norm_dtype(k, k_weight, cast)
    (q_dtype, q_fp32), (k_dtype, k_fp32) = _out_dtype(nq, cos.dtype, out_dtype), _out_dtype(nk, cos.dtype, out_dtype)
    q_out = torch.empty(q.shape, dtype=q_dtype, device=q.device)
    k_out = torch.empty(k.shape, dtype=k_dtype, device=k.device)
    qo4, ko4 = _bshd(q_out, seq_dim), _bshd(k_out, seq_dim)
    rstd_q = torch.empty((batch, seq) if norm_heads_together else (batch, seq, hq), dtype=torch.float32,
                         device=q.device)
    rstd_k = torch.empty((batch, seq) if norm_heads_together else (batch, seq, hk), dtype=torch.float32,
                         device=q.device)
    block_t, block_hq, block_hk, block_d, num_warps = _config(hq, hk, d, norm_heads_together, config)
    halves = _use_halves(d, rotary_dim, interleaved, config)
    tokens = batch * seq
    caps = device_caps(q.device)
    wrap_triton(_norm_rope_fwd_kernel)[(caps.programs(triton.cdiv(tokens, block_t)),)](
        q4, k4, qo4, ko4, q_weight, k_weight, rstd_q, rstd_k, c3, s3, tokens, seq, eps, weight_offset,
        *_strides(q4), *_strides(k4), *_strides(qo4)[:3], *_strides(ko4)[:3], *_strides(c3), *_strides(s3),
        HQ=hq, HK=hk, D=d, R=rotary_dim, ROT_START=d - rotary_dim if rotate_last else 0, INTERLEAVED=interleaved,
        TOGETHER=norm_heads_together, CAST=CAST_CODES[cast], Q_NORM_FP32=nq != q.dtype, K_NORM_FP32=nk != k.dtype,
        Q_COMPUTE_FP32=q_fp32, K_COMPUTE_FP32=k_fp32, HALVES=halves, BLOCK_T=block_t, BLOCK_HQ=block_hq,
        BLOCK_HK=block_hk, BLOCK_D=block_d // 2 if halves else block_d, INTERPRET=interpreting(),
        PERSISTENT=caps.persistent, num_warps=num_warps, enable_fp_fusion=False)
    return q_out, k_out, rstd_q, rstd_k


def qk_norm_rope_bwd(grad_q_out, grad_k_out, q, k, q_weight, k_weight, q_rstd, k_rstd, cast, cos, sin, rotary_dim,
                     interleaved, seq_dim, norm_heads_together=False, rotate_last=False, weight_offset=0.0,
                     config=None):
    """Gradients of qk_norm_rope_fwd: (grad_q, grad_k, grad_q_weight, grad_k_weight), one fused launch. grad_q/k
    have q/k's dtype, the weight grads their weights'. `config` = (BLOCK_T, BLOCK_H, num_warps, token blocks
    per program)."""
    q4, k4, c3, s3 = _qk_norm_layout(q, k, q_weight, k_weight, cast, cos, sin, rotary_dim, seq_dim,
                                     norm_heads_together)
    gq4, gk4 = _bshd(grad_q_out, seq_dim), _bshd(grad_k_out, seq_dim)
    batch, seq, hq, d = q4.shape
    hk = k4.shape[2]
    grad_q = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    grad_k = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dq4, dk4 = _bshd(grad_q, seq_dim), _bshd(grad_k, seq_dim)
    # H200, Qwen3 q 32 / k 8 heads of 128, 16384 tokens: 16 heads a tile and 16 tokens a program take 215 us, the
    # forward's 32 heads and 8 tokens 245 us (the backward holds more values per element).
    block_t, block_hq, block_hk, block_d, num_warps = _config(hq, hk, d, norm_heads_together,
                                                              config[:3] if config is not None else None, 2048)
    # Several token blocks per program on a GPU, so there are few weight-grad partials; one in the interpreter.
    steps = config[3] if config is not None else (1 if interpreting() else 16)
    tokens = batch * seq
    caps = device_caps(q.device)
    if caps.persistent:  # at most one program per core
        steps = torch.sym_max(steps, triton.cdiv(triton.cdiv(tokens, block_t), caps.vector_cores))
    tokens_per_program = block_t * steps
    programs = triton.cdiv(tokens, tokens_per_program)
    dwq = torch.empty((programs, q_weight.shape[0]), dtype=torch.float32, device=q.device)
    dwk = torch.empty((programs, k_weight.shape[0]), dtype=torch.float32, device=k.device)
    wrap_triton(_norm_rope_bwd_kernel)[(programs,)](
        gq4, gk4, q4, k4, dq4, dk4, q_weight, k_weight, q_rstd.contiguous(), k_rstd.contiguous(), dwq, dwk, c3, s3,
        tokens, seq,
        tokens_per_program, weight_offset,
        *_strides(gq4), *_strides(gk4), *_strides(q4), *_strides(k4), *_strides(dq4)[:3], *_strides(dk4)[:3],
        *_strides(c3), *_strides(s3),
        HQ=hq, HK=hk, D=d, R=rotary_dim, ROT_START=d - rotary_dim if rotate_last else 0, INTERLEAVED=interleaved,
        TOGETHER=norm_heads_together, CAST=CAST_CODES[cast], BLOCK_T=block_t, BLOCK_HQ=block_hq, BLOCK_HK=block_hk,
        BLOCK_D=block_d, INTERPRET=interpreting(), num_warps=num_warps, enable_fp_fusion=False)
    return grad_q, grad_k, dwq.sum(0).to(q_weight.dtype), dwk.sum(0).to(k_weight.dtype)
