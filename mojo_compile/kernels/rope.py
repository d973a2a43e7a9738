"""Triton rotary-embedding kernels: RoPE on q and k in one launch (forward and backward), and QK-norm (RMSNorm of each
head, or of all heads of a token) fused with RoPE, forward and backward. Launchers at the bottom.

Layout: q is [B, S, Hq, D] (seq_dim=1) or [B, Hq, S, D] (seq_dim=2) with any strides, k likewise with Hkv heads; the
kernels take the strides, nothing is copied. cos/sin are [B or 1, S, R] or [S, R], any strides (an expanded batch has
stride 0). A program owns BLOCK_T tokens (flattened b*S + s) and all q and k heads of them, as 3-D tiles
[BLOCK_T, BLOCK_H, BLOCK_D]: cos/sin are loaded once per token and shared by every head. Heads beyond BLOCK_H are
looped over; head counts and D need not be powers of 2 (masks).

The rotation needs each column's partner (i +- R/2, or i ^ 1 when interleaved). Two code paths, by the PAIR_TILES
constexpr:
- PAIR_TILES: the rotation pairs are loaded as two tiles, each the other's partner (the halves, or the even and the
  odd columns as two stride-2 tiles), and the columns that do not rotate as a third (BLOCK_PASS wide): every address
  is affine in the tile index and every value is loaded and normalised once. Rotate-half over the whole head (the
  common case) takes it on every device; every layout takes it where per-element addresses would be scalar loads
  (DeviceCaps.vector_gathers False: Ascend, whose compiler makes a loop of scalar loads of a load by permuted index).
- Otherwise (interleaved pairs and partial rotary on a GPU, and the qk-norm backward there) the partner values are
  loaded a second time with permuted column offsets, rather than shuffling registers: the same cache lines, so the
  second read is an L1 hit.

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
def _pair_columns(R: tl.constexpr, ROT_START: tl.constexpr, INTERLEAVED: tl.constexpr, BLOCK_P: tl.constexpr):
    """PAIR_TILES: the R/2 rotation pairs as two tiles, each column's partner at the same place in the other tile --
    the halves (i, i + R/2), or when interleaved the even and the odd columns (2i, 2i + 1), two stride-2 tiles.
    Returns the cos/sin indices of both tiles (j1, j2), their columns in the head (j + ROT_START) and the pair mask
    [1, 1, BLOCK_P]. Every address is affine in i: Ascend's compiler makes vector accesses of them, where a load by
    a permuted index becomes a loop of scalar loads. (Kept apart from _pair_tables: the columns address the stores,
    and torch's write analysis counts every pointer argument of a call as feeding its results -- kernels/common.py.)"""
    i = tl.arange(0, BLOCK_P)
    if INTERLEAVED:
        j1 = 2 * i
        j2 = j1 + 1
    else:
        j1 = i
        j2 = i + R // 2
    return j1, j2, j1 + ROT_START, j2 + ROT_START, (i < R // 2)[None, None, :]


@triton.jit
def _pass_columns(D: tl.constexpr, R: tl.constexpr, ROT_START: tl.constexpr, BLOCK_PASS: tl.constexpr):
    """PAIR_TILES: the D - R columns that do not rotate (after the rotated ones, or before them when the last dims
    rotate) as one tile: their columns in the head and mask [1, 1, BLOCK_PASS]. Unused where every column rotates."""
    p = tl.arange(0, BLOCK_PASS)
    if ROT_START == 0:
        cols = p + R
    else:
        cols = p
    return cols, (p < D - R)[None, None, :]


@triton.jit
def _pair_tables(C, SN, b, s, j1, j2, in_pair, tok_ok, scb, scs, scd, ssb, sss, ssd):
    """cos / sin of both tiles' columns (see _pair_columns), fp32, [BLOCK_T, 1, BLOCK_P]."""
    c1 = _load_row(C, b, s, j1, tok_ok, in_pair, scb, scs, scd)
    c2 = _load_row(C, b, s, j2, tok_ok, in_pair, scb, scs, scd)
    s1 = _load_row(SN, b, s, j1, tok_ok, in_pair, ssb, sss, ssd)
    s2 = _load_row(SN, b, s, j2, tok_ok, in_pair, ssb, sss, ssd)
    return c1, c2, s1, s2


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
    """Offsets of the token rows plus heads [h0, h0 + BLOCK_H) ([BLOCK_T, BLOCK_H, 1], int64) and the mask of a
    tile of D columns."""
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
def _rope_heads_pairs(X, Y, x_base, y_base, tok_ok, sxh, sxd, syh, c1, c2, s1, s2, col1, col2, in_pair, sign1,
                      pass_cols, H: tl.constexpr, PAIRS: tl.constexpr, PASS: tl.constexpr, BACKWARD: tl.constexpr,
                      COMPUTE_FP32: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_P: tl.constexpr,
                      BLOCK_PASS: tl.constexpr, INTERPRET: tl.constexpr):
    """_rope_heads on PAIR_TILES: y1 = x1*c1 + sign1*x2*s1, y2 = x2*c2 - sign1*x1*s2; the PASS columns that do not
    rotate are copied (rounded to Y's dtype, as the general kernel does where its rotation is masked off)."""
    for h0 in range(0, H, BLOCK_H):
        xo, _, mask = _head_tile(x_base, h0, tok_ok, sxh, H, PAIRS, BLOCK_H, BLOCK_P)
        x1 = tl.load(X + xo + col1[None, None, :] * sxd, mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(X + xo + col2[None, None, :] * sxd, mask=mask, other=0.0).to(tl.float32)
        if BACKWARD:
            y1 = _rotate(x1, x2, c1, s1, in_pair, sign1, Y.dtype.element_ty, False, INTERPRET)
            y2 = _rotate(x2, x1, c2, s2, in_pair, -sign1, Y.dtype.element_ty, False, INTERPRET)
        else:
            y1 = _rotate_eager(x1, x2, c1, s1, in_pair, sign1, Y.dtype.element_ty, COMPUTE_FP32, INTERPRET)
            y2 = _rotate_eager(x2, x1, c2, s2, in_pair, -sign1, Y.dtype.element_ty, COMPUTE_FP32, INTERPRET)
        yo, _, _ = _head_tile(y_base, h0, tok_ok, syh, H, PAIRS, BLOCK_H, BLOCK_P)
        tl.store(Y + yo + col1[None, None, :], y1, mask=mask)
        tl.store(Y + yo + col2[None, None, :], y2, mask=mask)
        if PASS > 0:
            xo, _, mask = _head_tile(x_base, h0, tok_ok, sxh, H, PASS, BLOCK_H, BLOCK_PASS)
            x = tl.load(X + xo + pass_cols[None, None, :] * sxd, mask=mask, other=0.0).to(tl.float32)
            yo, _, _ = _head_tile(y_base, h0, tok_ok, syh, H, PASS, BLOCK_H, BLOCK_PASS)
            tl.store(Y + yo + pass_cols[None, None, :], round_to(x, Y.dtype.element_ty, INTERPRET), mask=mask)


@writes("QO", "KO")
@triton.jit
def _rope_kernel(Q, K, QO, KO, C, SN, T, S,
                 sqb, sqs, sqh, sqd, skb, sks, skh, skd, sob, sos, soh, spb, sps, sph,
                 scb, scs, scd, ssb, sss, ssd,
                 HQ: tl.constexpr, HK: tl.constexpr, D: tl.constexpr, R: tl.constexpr, ROT_START: tl.constexpr,
                 INTERLEAVED: tl.constexpr, BACKWARD: tl.constexpr, COMPUTE_FP32: tl.constexpr,
                 PAIR_TILES: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr,
                 BLOCK_D: tl.constexpr, BLOCK_PASS: tl.constexpr, INTERPRET: tl.constexpr,
                 PERSISTENT: tl.constexpr):
    """Forward: y = rot(x). BACKWARD: the transpose, dx[d] = dy[d]*c[j] - sign*dy[partner]*s[jp] (fp32, one rounding).
    (sob, sos, soh) are QO's strides, (spb, sps, sph) KO's; their last stride is 1. PAIR_TILES: see _pair_columns
    (BLOCK_D is then the pairs' block, BLOCK_PASS the block of the columns that do not rotate)."""
    if PERSISTENT:  # one program per core, each taking every num_programs-th token block
        for block in range(tl.program_id(0), tl.cdiv(T, BLOCK_T), tl.num_programs(0)):
            _rope_block(block, Q, K, QO, KO, C, SN, T, S, sqb, sqs, sqh, sqd, skb, sks, skh, skd, sob, sos, soh, spb,
                        sps, sph, scb, scs, scd, ssb, sss, ssd, HQ, HK, D, R, ROT_START, INTERLEAVED, BACKWARD,
                        COMPUTE_FP32, PAIR_TILES, BLOCK_T, BLOCK_HQ, BLOCK_HK, BLOCK_D, BLOCK_PASS, INTERPRET)
    else:
        _rope_block(tl.program_id(0), Q, K, QO, KO, C, SN, T, S, sqb, sqs, sqh, sqd, skb, sks, skh, skd, sob, sos,
                    soh, spb, sps, sph, scb, scs, scd, ssb, sss, ssd, HQ, HK, D, R, ROT_START, INTERLEAVED,
                    BACKWARD, COMPUTE_FP32, PAIR_TILES, BLOCK_T, BLOCK_HQ, BLOCK_HK, BLOCK_D, BLOCK_PASS, INTERPRET)


@triton.jit
def _rope_block(block, Q, K, QO, KO, C, SN, T, S,
                sqb, sqs, sqh, sqd, skb, sks, skh, skd, sob, sos, soh, spb, sps, sph,
                scb, scs, scd, ssb, sss, ssd,
                HQ: tl.constexpr, HK: tl.constexpr, D: tl.constexpr, R: tl.constexpr, ROT_START: tl.constexpr,
                INTERLEAVED: tl.constexpr, BACKWARD: tl.constexpr, COMPUTE_FP32: tl.constexpr,
                PAIR_TILES: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr,
                BLOCK_D: tl.constexpr, BLOCK_PASS: tl.constexpr, INTERPRET: tl.constexpr):
    _, tok_ok, b, s_idx = _tokens(block * BLOCK_T, T, S, BLOCK_T)
    if PAIR_TILES:
        j1, j2, col1, col2, in_pair = _pair_columns(R, ROT_START, INTERLEAVED, BLOCK_D)
        pass_cols, _ = _pass_columns(D, R, ROT_START, BLOCK_PASS)
        c1, c2, s1, s2 = _pair_tables(C, SN, b, s_idx, j1, j2, in_pair, tok_ok, scb, scs, scd, ssb, sss, ssd)
        if BACKWARD:  # dx1 = dy1*c1 + dy2*s2, dx2 = dy2*c2 - dy1*s1
            s1, s2 = s2, s1
            sign1 = 1.0
        else:
            sign1 = -1.0
        _rope_heads_pairs(Q, QO, b * sqb + s_idx * sqs, b * sob + s_idx * sos, tok_ok, sqh, sqd, soh,
                          c1, c2, s1, s2, col1, col2, in_pair, sign1, pass_cols, HQ, R // 2, D - R, BACKWARD,
                          COMPUTE_FP32, BLOCK_HQ, BLOCK_D, BLOCK_PASS, INTERPRET)
        _rope_heads_pairs(K, KO, b * skb + s_idx * sks, b * spb + s_idx * sps, tok_ok, skh, skd, sph,
                          c1, c2, s1, s2, col1, col2, in_pair, sign1, pass_cols, HK, R // 2, D - R, BACKWARD,
                          COMPUTE_FP32, BLOCK_HK, BLOCK_D, BLOCK_PASS, INTERPRET)
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


# ------------------------------------------------------------------------------------------ qk-norm: shared pieces
@triton.jit
def _over_heads(per_head, TOGETHER: tl.constexpr):
    """A per-head row sum ([BLOCK_T, BLOCK_H]) as is, or summed over the token's heads ([BLOCK_T, 1]) when the norm
    spans them all (TOGETHER)."""
    if TOGETHER:
        per_head = tl.sum(per_head, axis=1)[:, None]
    return per_head


@triton.jit
def _store_rstd(RSTD, ss, eps, tok, tok_ok, h, N: tl.constexpr, H: tl.constexpr, TOGETHER: tl.constexpr):
    """1/rms from the sums of squares of each head's row ss ([BLOCK_T, BLOCK_H]), stored ([B, S] when TOGETHER, else
    [B, S, H]); returned as [BLOCK_T, BLOCK_H or 1, 1]."""
    rstd = tl.math.rsqrt(_over_heads(ss, TOGETHER) / N + eps)
    if TOGETHER:
        tl.store(RSTD + tok[:, None], rstd, mask=tok_ok[:, None])
    else:
        tl.store(RSTD + tok[:, None] * H + h[None, :], rstd, mask=tok_ok[:, None] & (h < H)[None, :])
    return rstd[:, :, None]


@triton.jit
def _load_rstd(RSTD, tok, tok_ok, h, H: tl.constexpr, TOGETHER: tl.constexpr):
    """The forward's rstd, as [BLOCK_T, BLOCK_H or 1, 1]."""
    if TOGETHER:
        rstd = tl.load(RSTD + tok, mask=tok_ok, other=0.0)[:, None, None]
    else:
        rstd = tl.load(RSTD + tok[:, None] * H + h[None, :], mask=tok_ok[:, None] & (h < H)[None, :],
                       other=0.0)[:, :, None]
    return rstd


@triton.jit
def _weights(W, h, cols, cols_ok, H: tl.constexpr, D: tl.constexpr, TOGETHER: tl.constexpr):
    """The norm weight of columns `cols` (mask cols_ok, [1, 1, BLOCK]), fp32: one weight row for all heads, or head
    h's row of the [H * D] weight when TOGETHER. triton-ascend does not broadcast a pointer to a wider mask: there
    the mask keeps the pointer's shape (NVIDIA keeps its code, which broadcasts)."""
    w_row = h[None, :, None] * D if TOGETHER else 0
    w_ok = (h < H)[None, :, None] & cols_ok
    if TRITON_ASCEND:
        if not TOGETHER:
            w_ok = cols_ok
    return tl.load(W + w_row + cols[None, None, :], mask=w_ok, other=0.0).to(tl.float32)


@triton.jit
def _seen_by_weight(n, IN_DTYPE: tl.constexpr, CAST: tl.constexpr, INTERPRET: tl.constexpr):
    """The normalised value the weight multiplied in the forward: rounded to the input dtype in "normed" mode."""
    if CAST == 0:
        n = round_to(n, IN_DTYPE, INTERPRET).to(tl.float32)
    return n


@triton.jit
def _store_dw(DW, acc, pid, cols, COLS: tl.constexpr, H: tl.constexpr, D: tl.constexpr, TOGETHER: tl.constexpr,
              BLOCK_H: tl.constexpr, BLOCK: tl.constexpr):
    """This program's weight-grad partial of the COLS columns `cols` ([BLOCK]), from acc [BLOCK_H, BLOCK]."""
    ok = tl.arange(0, BLOCK) < COLS
    if TOGETHER:  # weight [H * D]
        h = tl.arange(0, BLOCK_H)
        tl.store(DW + pid.to(tl.int64) * (H * D) + h[:, None] * D + cols[None, :], acc,
                 mask=(h < H)[:, None] & ok[None, :])
    else:  # weight [D], shared by the heads
        tl.store(DW + pid.to(tl.int64) * D + cols, tl.sum(acc, axis=0), mask=ok)


# --------------------------------------------------------------------------------------------- qk-norm + rope fwd
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
        w = _weights(W, h, d, (d < D)[None, None, :], H, D, TOGETHER)
        wp = _weights(W, h, partner, (d < D)[None, None, :], H, D, TOGETHER)
        rstd = _store_rstd(RSTD, tl.sum(x * x, axis=2), eps, tok, tok_ok, h, H * D if TOGETHER else D, H, TOGETHER)
        # The partner shares the head (and so the rstd); both are normalised exactly like the eager norm's output.
        n = round_to(normalise(x, rstd, w, weight_offset, IN_DTYPE, True, CAST, INTERPRET), NORM_DTYPE, INTERPRET)
        n_p = round_to(normalise(xp, rstd, wp, weight_offset, IN_DTYPE, True, CAST, INTERPRET), NORM_DTYPE, INTERPRET)
        y = _rotate_eager(n.to(tl.float32), n_p.to(tl.float32), c, s, rot, sign, Y.dtype.element_ty, COMPUTE_FP32,
                          INTERPRET)
        yo, _, _ = _head_tile(y_base, h0, tok_ok, syh, H, D, BLOCK_H, BLOCK_D)
        tl.store(Y + yo + d[None, None, :], y, mask=mask)


@triton.jit
def _norm_rope_fwd_heads_pairs(X, Y, W, RSTD, tok, x_base, y_base, tok_ok, sxh, sxd, syh, c1, c2, s1, s2, col1, col2,
                               in_pair, pass_cols, pass_ok, eps, weight_offset, H: tl.constexpr, D: tl.constexpr,
                               R: tl.constexpr, TOGETHER: tl.constexpr, CAST: tl.constexpr, NORM_FP32: tl.constexpr,
                               COMPUTE_FP32: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_P: tl.constexpr,
                               BLOCK_PASS: tl.constexpr, INTERPRET: tl.constexpr):
    """_norm_rope_fwd_heads on PAIR_TILES: each value is loaded and normalised once; a head's sum of squares adds up
    its pair tiles and the tile of the columns that do not rotate, which are normalised and copied."""
    IN_DTYPE: tl.constexpr = X.dtype.element_ty
    NORM_DTYPE: tl.constexpr = tl.float32 if NORM_FP32 else X.dtype.element_ty
    PAIRS: tl.constexpr = R // 2
    PASS: tl.constexpr = D - R
    for h0 in range(0, H, BLOCK_H):
        xo, h, mask = _head_tile(x_base, h0, tok_ok, sxh, H, PAIRS, BLOCK_H, BLOCK_P)
        x1 = tl.load(X + xo + col1[None, None, :] * sxd, mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(X + xo + col2[None, None, :] * sxd, mask=mask, other=0.0).to(tl.float32)
        w1 = _weights(W, h, col1, in_pair, H, D, TOGETHER)
        w2 = _weights(W, h, col2, in_pair, H, D, TOGETHER)
        ss = tl.sum(x1 * x1 + x2 * x2, axis=2)
        if PASS > 0:
            po, _, pass_mask = _head_tile(x_base, h0, tok_ok, sxh, H, PASS, BLOCK_H, BLOCK_PASS)
            xp = tl.load(X + po + pass_cols[None, None, :] * sxd, mask=pass_mask, other=0.0).to(tl.float32)
            ss += tl.sum(xp * xp, axis=2)
        rstd = _store_rstd(RSTD, ss, eps, tok, tok_ok, h, H * D if TOGETHER else D, H, TOGETHER)
        n1 = round_to(normalise(x1, rstd, w1, weight_offset, IN_DTYPE, True, CAST, INTERPRET), NORM_DTYPE,
                      INTERPRET).to(tl.float32)
        n2 = round_to(normalise(x2, rstd, w2, weight_offset, IN_DTYPE, True, CAST, INTERPRET), NORM_DTYPE,
                      INTERPRET).to(tl.float32)
        y1 = _rotate_eager(n1, n2, c1, s1, in_pair, -1.0, Y.dtype.element_ty, COMPUTE_FP32, INTERPRET)
        y2 = _rotate_eager(n2, n1, c2, s2, in_pair, 1.0, Y.dtype.element_ty, COMPUTE_FP32, INTERPRET)
        yo, _, _ = _head_tile(y_base, h0, tok_ok, syh, H, PAIRS, BLOCK_H, BLOCK_P)
        tl.store(Y + yo + col1[None, None, :], y1, mask=mask)
        tl.store(Y + yo + col2[None, None, :], y2, mask=mask)
        if PASS > 0:
            wp = _weights(W, h, pass_cols, pass_ok, H, D, TOGETHER)
            n_p = round_to(normalise(xp, rstd, wp, weight_offset, IN_DTYPE, True, CAST, INTERPRET), NORM_DTYPE,
                           INTERPRET).to(tl.float32)
            yo, _, _ = _head_tile(y_base, h0, tok_ok, syh, H, PASS, BLOCK_H, BLOCK_PASS)
            tl.store(Y + yo + pass_cols[None, None, :], round_to(n_p, Y.dtype.element_ty, INTERPRET), mask=pass_mask)


@writes("QO", "KO", "RQ", "RK")
@triton.jit
def _norm_rope_fwd_kernel(Q, K, QO, KO, WQ, WK, RQ, RK, C, SN, T, S, eps, weight_offset,
                          sqb, sqs, sqh, sqd, skb, sks, skh, skd, sob, sos, soh, spb, sps, sph,
                          scb, scs, scd, ssb, sss, ssd,
                          HQ: tl.constexpr, HK: tl.constexpr, D: tl.constexpr, R: tl.constexpr,
                          ROT_START: tl.constexpr, INTERLEAVED: tl.constexpr, TOGETHER: tl.constexpr,
                          CAST: tl.constexpr, Q_NORM_FP32: tl.constexpr, K_NORM_FP32: tl.constexpr,
                          Q_COMPUTE_FP32: tl.constexpr, K_COMPUTE_FP32: tl.constexpr, PAIR_TILES: tl.constexpr,
                          BLOCK_T: tl.constexpr, BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr,
                          BLOCK_D: tl.constexpr, BLOCK_PASS: tl.constexpr, INTERPRET: tl.constexpr,
                          PERSISTENT: tl.constexpr):
    """PAIR_TILES: see _pair_columns (BLOCK_D is then the pairs' block, BLOCK_PASS that of the columns that do not
    rotate)."""
    if PERSISTENT:  # one program per core, each taking every num_programs-th token block
        for block in range(tl.program_id(0), tl.cdiv(T, BLOCK_T), tl.num_programs(0)):
            _norm_rope_fwd_block(block, Q, K, QO, KO, WQ, WK, RQ, RK, C, SN, T, S, eps, weight_offset, sqb, sqs, sqh,
                                 sqd, skb, sks, skh, skd, sob, sos, soh, spb, sps, sph, scb, scs, scd, ssb, sss, ssd,
                                 HQ, HK, D, R, ROT_START, INTERLEAVED, TOGETHER, CAST, Q_NORM_FP32, K_NORM_FP32,
                                 Q_COMPUTE_FP32, K_COMPUTE_FP32, PAIR_TILES, BLOCK_T, BLOCK_HQ, BLOCK_HK, BLOCK_D,
                                 BLOCK_PASS, INTERPRET)
    else:
        _norm_rope_fwd_block(tl.program_id(0), Q, K, QO, KO, WQ, WK, RQ, RK, C, SN, T, S, eps, weight_offset, sqb,
                             sqs, sqh, sqd, skb, sks, skh, skd, sob, sos, soh, spb, sps, sph, scb, scs, scd, ssb,
                             sss, ssd, HQ, HK, D, R, ROT_START, INTERLEAVED, TOGETHER, CAST, Q_NORM_FP32,
                             K_NORM_FP32, Q_COMPUTE_FP32, K_COMPUTE_FP32, PAIR_TILES, BLOCK_T, BLOCK_HQ, BLOCK_HK,
                             BLOCK_D, BLOCK_PASS, INTERPRET)


@triton.jit
def _norm_rope_fwd_block(block, Q, K, QO, KO, WQ, WK, RQ, RK, C, SN, T, S, eps, weight_offset,
                         sqb, sqs, sqh, sqd, skb, sks, skh, skd, sob, sos, soh, spb, sps, sph,
                         scb, scs, scd, ssb, sss, ssd,
                         HQ: tl.constexpr, HK: tl.constexpr, D: tl.constexpr, R: tl.constexpr,
                         ROT_START: tl.constexpr, INTERLEAVED: tl.constexpr, TOGETHER: tl.constexpr,
                         CAST: tl.constexpr, Q_NORM_FP32: tl.constexpr, K_NORM_FP32: tl.constexpr,
                         Q_COMPUTE_FP32: tl.constexpr, K_COMPUTE_FP32: tl.constexpr, PAIR_TILES: tl.constexpr,
                         BLOCK_T: tl.constexpr, BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr,
                         BLOCK_D: tl.constexpr, BLOCK_PASS: tl.constexpr, INTERPRET: tl.constexpr):
    eps = tl.cast(eps, tl.float32)
    weight_offset = tl.cast(weight_offset, tl.float32)
    tok, tok_ok, b, s_idx = _tokens(block * BLOCK_T, T, S, BLOCK_T)
    if PAIR_TILES:
        j1, j2, col1, col2, in_pair = _pair_columns(R, ROT_START, INTERLEAVED, BLOCK_D)
        pass_cols, pass_ok = _pass_columns(D, R, ROT_START, BLOCK_PASS)
        c1, c2, s1, s2 = _pair_tables(C, SN, b, s_idx, j1, j2, in_pair, tok_ok, scb, scs, scd, ssb, sss, ssd)
        _norm_rope_fwd_heads_pairs(Q, QO, WQ, RQ, tok, b * sqb + s_idx * sqs, b * sob + s_idx * sos, tok_ok, sqh,
                                   sqd, soh, c1, c2, s1, s2, col1, col2, in_pair, pass_cols, pass_ok, eps,
                                   weight_offset, HQ, D, R, TOGETHER, CAST, Q_NORM_FP32, Q_COMPUTE_FP32, BLOCK_HQ,
                                   BLOCK_D, BLOCK_PASS, INTERPRET)
        _norm_rope_fwd_heads_pairs(K, KO, WK, RK, tok, b * skb + s_idx * sks, b * spb + s_idx * sps, tok_ok, skh,
                                   skd, sph, c1, c2, s1, s2, col1, col2, in_pair, pass_cols, pass_ok, eps,
                                   weight_offset, HK, D, R, TOGETHER, CAST, K_NORM_FP32, K_COMPUTE_FP32, BLOCK_HK,
                                   BLOCK_D, BLOCK_PASS, INTERPRET)
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
        w = _weights(W, h, d, (d < D)[None, None, :], H, D, TOGETHER) + weight_offset
        rstd = _load_rstd(RSTD, tok, tok_ok, h, H, TOGETHER)
        n = x * rstd
        dn = g * w
        dot = _over_heads(tl.sum(dn * n, axis=2), TOGETHER)
        dx = (dn - n * (dot / N)[:, :, None]) * rstd
        dxo, _, _ = _head_tile(dx_base, h0, tok_ok, sdxh, H, D, BLOCK_H, BLOCK_D)
        tl.store(DX + dxo + d[None, None, :], round_to(dx, DX.dtype.element_ty, INTERPRET), mask=mask)
        acc += tl.sum(g * _seen_by_weight(n, X.dtype.element_ty, CAST, INTERPRET), axis=0)
    return acc


@triton.jit
def _norm_rope_bwd_heads_pairs(DY, X, DX, W, RSTD, acc1, acc2, acc_pass, tok, dy_base, x_base, dx_base, tok_ok, sdyh,
                               sdyd, sxh, sxd, sdxh, c1, c2, s1, s2, col1, col2, in_pair, pass_cols, pass_ok,
                               weight_offset, H: tl.constexpr, D: tl.constexpr, R: tl.constexpr,
                               TOGETHER: tl.constexpr, CAST: tl.constexpr, BLOCK_H: tl.constexpr,
                               BLOCK_P: tl.constexpr, BLOCK_PASS: tl.constexpr, INTERPRET: tl.constexpr):
    """_norm_rope_bwd_heads on PAIR_TILES: the rotation's transpose g1 = dy1*c1 + dy2*s2, g2 = dy2*c2 - dy1*s1 (g = dy
    on the columns that do not rotate), then the norm's backward, whose dot product adds up the three tiles. Returns
    the three tiles' weight-grad accumulators."""
    N: tl.constexpr = H * D if TOGETHER else D
    PAIRS: tl.constexpr = R // 2
    PASS: tl.constexpr = D - R
    IN_DTYPE: tl.constexpr = X.dtype.element_ty
    for h0 in range(0, H, BLOCK_H):
        dyo, h, mask = _head_tile(dy_base, h0, tok_ok, sdyh, H, PAIRS, BLOCK_H, BLOCK_P)
        dy1 = tl.load(DY + dyo + col1[None, None, :] * sdyd, mask=mask, other=0.0).to(tl.float32)
        dy2 = tl.load(DY + dyo + col2[None, None, :] * sdyd, mask=mask, other=0.0).to(tl.float32)
        g1 = _rotate(dy1, dy2, c1, s2, in_pair, 1.0, tl.float32, False, INTERPRET)
        g2 = _rotate(dy2, dy1, c2, s1, in_pair, -1.0, tl.float32, False, INTERPRET)
        xo, _, _ = _head_tile(x_base, h0, tok_ok, sxh, H, PAIRS, BLOCK_H, BLOCK_P)
        x1 = tl.load(X + xo + col1[None, None, :] * sxd, mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(X + xo + col2[None, None, :] * sxd, mask=mask, other=0.0).to(tl.float32)
        rstd = _load_rstd(RSTD, tok, tok_ok, h, H, TOGETHER)
        n1, n2 = x1 * rstd, x2 * rstd
        dn1 = g1 * (_weights(W, h, col1, in_pair, H, D, TOGETHER) + weight_offset)
        dn2 = g2 * (_weights(W, h, col2, in_pair, H, D, TOGETHER) + weight_offset)
        dot = tl.sum(dn1 * n1 + dn2 * n2, axis=2)
        if PASS > 0:
            po, _, pass_mask = _head_tile(dy_base, h0, tok_ok, sdyh, H, PASS, BLOCK_H, BLOCK_PASS)
            g_p = tl.load(DY + po + pass_cols[None, None, :] * sdyd, mask=pass_mask, other=0.0).to(tl.float32)
            po, _, _ = _head_tile(x_base, h0, tok_ok, sxh, H, PASS, BLOCK_H, BLOCK_PASS)
            n_p = tl.load(X + po + pass_cols[None, None, :] * sxd, mask=pass_mask, other=0.0).to(tl.float32) * rstd
            dn_p = g_p * (_weights(W, h, pass_cols, pass_ok, H, D, TOGETHER) + weight_offset)
            dot += tl.sum(dn_p * n_p, axis=2)
        dot_n = (_over_heads(dot, TOGETHER) / N)[:, :, None]
        dxo, _, _ = _head_tile(dx_base, h0, tok_ok, sdxh, H, PAIRS, BLOCK_H, BLOCK_P)
        tl.store(DX + dxo + col1[None, None, :], round_to((dn1 - n1 * dot_n) * rstd, DX.dtype.element_ty, INTERPRET),
                 mask=mask)
        tl.store(DX + dxo + col2[None, None, :], round_to((dn2 - n2 * dot_n) * rstd, DX.dtype.element_ty, INTERPRET),
                 mask=mask)
        acc1 += tl.sum(g1 * _seen_by_weight(n1, IN_DTYPE, CAST, INTERPRET), axis=0)
        acc2 += tl.sum(g2 * _seen_by_weight(n2, IN_DTYPE, CAST, INTERPRET), axis=0)
        if PASS > 0:
            po, _, _ = _head_tile(dx_base, h0, tok_ok, sdxh, H, PASS, BLOCK_H, BLOCK_PASS)
            tl.store(DX + po + pass_cols[None, None, :],
                     round_to((dn_p - n_p * dot_n) * rstd, DX.dtype.element_ty, INTERPRET), mask=pass_mask)
            acc_pass += tl.sum(g_p * _seen_by_weight(n_p, IN_DTYPE, CAST, INTERPRET), axis=0)
    return acc1, acc2, acc_pass


@writes("DQ", "DK", "DWQ", "DWK")
@triton.jit
def _norm_rope_bwd_kernel(DQ_OUT, DK_OUT, Q, K, DQ, DK, WQ, WK, RQ, RK, DWQ, DWK, C, SN, T, S, tokens_per_program,
                          weight_offset,
                          sgqb, sgqs, sgqh, sgqd, sgkb, sgks, sgkh, sgkd, sqb, sqs, sqh, sqd, skb, sks, skh, skd,
                          sob, sos, soh, spb, sps, sph, scb, scs, scd, ssb, sss, ssd,
                          HQ: tl.constexpr, HK: tl.constexpr, D: tl.constexpr, R: tl.constexpr,
                          ROT_START: tl.constexpr, INTERLEAVED: tl.constexpr, TOGETHER: tl.constexpr,
                          CAST: tl.constexpr, PAIR_TILES: tl.constexpr, BLOCK_T: tl.constexpr,
                          BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr, BLOCK_D: tl.constexpr,
                          BLOCK_PASS: tl.constexpr, INTERPRET: tl.constexpr):
    """RoPE backward then RMSNorm backward, one pass. (sob, sos, soh) are DQ's strides, (spb, sps, sph) DK's.
    PAIR_TILES: see _pair_columns (BLOCK_D is then the pairs' block, BLOCK_PASS that of the columns that do not
    rotate)."""
    weight_offset = tl.cast(weight_offset, tl.float32)
    pid = tl.program_id(0)
    if PAIR_TILES:
        _norm_rope_bwd_pairs(pid, DQ_OUT, DK_OUT, Q, K, DQ, DK, WQ, WK, RQ, RK, DWQ, DWK, C, SN, T, S,
                             tokens_per_program, weight_offset, sgqb, sgqs, sgqh, sgqd, sgkb, sgks, sgkh, sgkd, sqb,
                             sqs, sqh, sqd, skb, sks, skh, skd, sob, sos, soh, spb, sps, sph, scb, scs, scd, ssb,
                             sss, ssd, HQ, HK, D, R, ROT_START, INTERLEAVED, TOGETHER, CAST, BLOCK_T, BLOCK_HQ,
                             BLOCK_HK, BLOCK_D, BLOCK_PASS, INTERPRET)
    else:
        d, rot, j, jp, partner, sign = _columns(R, ROT_START, INTERLEAVED, BLOCK_D)
        acc_q = tl.zeros([BLOCK_HQ, BLOCK_D], dtype=tl.float32)
        acc_k = tl.zeros([BLOCK_HK, BLOCK_D], dtype=tl.float32)
        for i in range(0, tokens_per_program, BLOCK_T):
            tok, tok_ok, b, s_idx = _tokens(pid.to(tl.int64) * tokens_per_program + i, T, S, BLOCK_T)
            c = _load_row(C, b, s_idx, j, tok_ok, rot, scb, scs, scd)
            s = _load_row(SN, b, s_idx, jp, tok_ok, rot, ssb, sss, ssd)
            acc_q = _norm_rope_bwd_heads(DQ_OUT, Q, DQ, WQ, RQ, acc_q, tok, b * sgqb + s_idx * sgqs,
                                         b * sqb + s_idx * sqs, b * sob + s_idx * sos, tok_ok, sgqh, sgqd, sqh, sqd,
                                         soh, c, s, d, partner, rot, -sign, weight_offset, HQ, D, TOGETHER, CAST,
                                         BLOCK_HQ, BLOCK_D, INTERPRET)
            acc_k = _norm_rope_bwd_heads(DK_OUT, K, DK, WK, RK, acc_k, tok, b * sgkb + s_idx * sgks,
                                         b * skb + s_idx * sks, b * spb + s_idx * sps, tok_ok, sgkh, sgkd, skh, skd,
                                         sph, c, s, d, partner, rot, -sign, weight_offset, HK, D, TOGETHER, CAST,
                                         BLOCK_HK, BLOCK_D, INTERPRET)
        _store_dw(DWQ, acc_q, pid, d, D, HQ, D, TOGETHER, BLOCK_HQ, BLOCK_D)
        _store_dw(DWK, acc_k, pid, d, D, HK, D, TOGETHER, BLOCK_HK, BLOCK_D)


@triton.jit
def _norm_rope_bwd_pairs(pid, DQ_OUT, DK_OUT, Q, K, DQ, DK, WQ, WK, RQ, RK, DWQ, DWK, C, SN, T, S, tokens_per_program,
                         weight_offset,
                         sgqb, sgqs, sgqh, sgqd, sgkb, sgks, sgkh, sgkd, sqb, sqs, sqh, sqd, skb, sks, skh, skd,
                         sob, sos, soh, spb, sps, sph, scb, scs, scd, ssb, sss, ssd,
                         HQ: tl.constexpr, HK: tl.constexpr, D: tl.constexpr, R: tl.constexpr,
                         ROT_START: tl.constexpr, INTERLEAVED: tl.constexpr, TOGETHER: tl.constexpr,
                         CAST: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr,
                         BLOCK_P: tl.constexpr, BLOCK_PASS: tl.constexpr, INTERPRET: tl.constexpr):
    """_norm_rope_bwd_kernel's program on PAIR_TILES: a weight-grad accumulator per tile of q's and of k's."""
    j1, j2, col1, col2, in_pair = _pair_columns(R, ROT_START, INTERLEAVED, BLOCK_P)
    pass_cols, pass_ok = _pass_columns(D, R, ROT_START, BLOCK_PASS)
    acc_q1 = tl.zeros([BLOCK_HQ, BLOCK_P], dtype=tl.float32)
    acc_q2 = tl.zeros([BLOCK_HQ, BLOCK_P], dtype=tl.float32)
    acc_q_pass = tl.zeros([BLOCK_HQ, BLOCK_PASS], dtype=tl.float32)
    acc_k1 = tl.zeros([BLOCK_HK, BLOCK_P], dtype=tl.float32)
    acc_k2 = tl.zeros([BLOCK_HK, BLOCK_P], dtype=tl.float32)
    acc_k_pass = tl.zeros([BLOCK_HK, BLOCK_PASS], dtype=tl.float32)
    for i in range(0, tokens_per_program, BLOCK_T):
        tok, tok_ok, b, s_idx = _tokens(pid.to(tl.int64) * tokens_per_program + i, T, S, BLOCK_T)
        c1, c2, s1, s2 = _pair_tables(C, SN, b, s_idx, j1, j2, in_pair, tok_ok, scb, scs, scd, ssb, sss, ssd)
        acc_q1, acc_q2, acc_q_pass = _norm_rope_bwd_heads_pairs(
            DQ_OUT, Q, DQ, WQ, RQ, acc_q1, acc_q2, acc_q_pass, tok, b * sgqb + s_idx * sgqs, b * sqb + s_idx * sqs,
            b * sob + s_idx * sos, tok_ok, sgqh, sgqd, sqh, sqd, soh, c1, c2, s1, s2, col1, col2, in_pair, pass_cols,
            pass_ok, weight_offset, HQ, D, R, TOGETHER, CAST, BLOCK_HQ, BLOCK_P, BLOCK_PASS, INTERPRET)
        acc_k1, acc_k2, acc_k_pass = _norm_rope_bwd_heads_pairs(
            DK_OUT, K, DK, WK, RK, acc_k1, acc_k2, acc_k_pass, tok, b * sgkb + s_idx * sgks, b * skb + s_idx * sks,
            b * spb + s_idx * sps, tok_ok, sgkh, sgkd, skh, skd, sph, c1, c2, s1, s2, col1, col2, in_pair, pass_cols,
            pass_ok, weight_offset, HK, D, R, TOGETHER, CAST, BLOCK_HK, BLOCK_P, BLOCK_PASS, INTERPRET)
    _store_dw(DWQ, acc_q1, pid, col1, R // 2, HQ, D, TOGETHER, BLOCK_HQ, BLOCK_P)
    _store_dw(DWQ, acc_q2, pid, col2, R // 2, HQ, D, TOGETHER, BLOCK_HQ, BLOCK_P)
    _store_dw(DWK, acc_k1, pid, col1, R // 2, HK, D, TOGETHER, BLOCK_HK, BLOCK_P)
    _store_dw(DWK, acc_k2, pid, col2, R // 2, HK, D, TOGETHER, BLOCK_HK, BLOCK_P)
    if D > R:
        _store_dw(DWQ, acc_q_pass, pid, pass_cols, D - R, HQ, D, TOGETHER, BLOCK_HQ, BLOCK_PASS)
        _store_dw(DWK, acc_k_pass, pid, pass_cols, D - R, HK, D, TOGETHER, BLOCK_HK, BLOCK_PASS)


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
    """(BLOCK_T, BLOCK_HQ, BLOCK_HK, num_warps). A tile holds ~gpu_budget elements on a GPU (a few tokens
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
    return block_t, block_hq, block_hk, num_warps


def _use_pair_tiles(d: int, rotary_dim: int, interleaved: bool, caps, config=None) -> bool:
    """PAIR_TILES (see _pair_columns) where the device makes scalar loads of per-element addresses
    (caps.vector_gathers False), in every layout. Elsewhere for rotate-half over the whole head, each half loaded
    once, unless a 4-field config asks for the general kernel (the sweep compares the two)."""
    if not caps.vector_gathers:
        return True
    if config is not None and len(config) > 3 and not config[3]:
        return False
    return not interleaved and rotary_dim == d and d > 0


def _column_blocks(d: int, rotary_dim: int, pair_tiles: bool) -> tuple[int, int]:
    """(BLOCK_D, BLOCK_PASS): with PAIR_TILES the block of the rotary_dim / 2 pairs and the block of the d -
    rotary_dim columns that do not rotate (1, unused, when every column rotates); else the head's block and 1
    (unused)."""
    if not pair_tiles:
        return triton.next_power_of_2(max(d, 1)), 1
    return triton.next_power_of_2(max(rotary_dim // 2, 1)), triton.next_power_of_2(max(d - rotary_dim, 1))


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
    block_t, block_hq, block_hk, num_warps = _config(hq, hk, d, False, config)
    tokens = batch * seq
    caps = device_caps(q.device)
    pair_tiles = _use_pair_tiles(d, rotary_dim, interleaved, caps, config)
    block_d, block_pass = _column_blocks(d, rotary_dim, pair_tiles)
    wrap_triton(_rope_kernel)[(caps.programs(triton.cdiv(tokens, block_t)),)](
        q4, k4, qo4, ko4, c3, s3, tokens, seq, *_strides(q4), *_strides(k4), *_strides(qo4)[:3], *_strides(ko4)[:3],
        *_strides(c3), *_strides(s3),
        HQ=hq, HK=hk, D=d, R=rotary_dim, ROT_START=d - rotary_dim if rotate_last else 0, INTERLEAVED=interleaved,
        BACKWARD=backward, COMPUTE_FP32=compute_fp32, PAIR_TILES=pair_tiles, BLOCK_T=block_t, BLOCK_HQ=block_hq,
        BLOCK_HK=block_hk, BLOCK_D=block_d, BLOCK_PASS=block_pass, INTERPRET=interpreting(),
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
    block_t, block_hq, block_hk, num_warps = _config(hq, hk, d, norm_heads_together, config)
    tokens = batch * seq
    caps = device_caps(q.device)
    pair_tiles = _use_pair_tiles(d, rotary_dim, interleaved, caps, config)
    block_d, block_pass = _column_blocks(d, rotary_dim, pair_tiles)
    wrap_triton(_norm_rope_fwd_kernel)[(caps.programs(triton.cdiv(tokens, block_t)),)](
        q4, k4, qo4, ko4, q_weight, k_weight, rstd_q, rstd_k, c3, s3, tokens, seq, eps, weight_offset,
        *_strides(q4), *_strides(k4), *_strides(qo4)[:3], *_strides(ko4)[:3], *_strides(c3), *_strides(s3),
        HQ=hq, HK=hk, D=d, R=rotary_dim, ROT_START=d - rotary_dim if rotate_last else 0, INTERLEAVED=interleaved,
        TOGETHER=norm_heads_together, CAST=CAST_CODES[cast], Q_NORM_FP32=nq != q.dtype, K_NORM_FP32=nk != k.dtype,
        Q_COMPUTE_FP32=q_fp32, K_COMPUTE_FP32=k_fp32, PAIR_TILES=pair_tiles, BLOCK_T=block_t, BLOCK_HQ=block_hq,
        BLOCK_HK=block_hk, BLOCK_D=block_d, BLOCK_PASS=block_pass, INTERPRET=interpreting(),
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
    block_t, block_hq, block_hk, num_warps = _config(hq, hk, d, norm_heads_together,
                                                     config[:3] if config is not None else None, 2048)
    # Several token blocks per program on a GPU, so there are few weight-grad partials; one in the interpreter.
    steps = config[3] if config is not None else (1 if interpreting() else 16)
    tokens = batch * seq
    caps = device_caps(q.device)
    # PAIR_TILES only where per-element addresses are scalar loads: on a GPU every layout takes the general kernel
    pair_tiles = not caps.vector_gathers
    block_d, block_pass = _column_blocks(d, rotary_dim, pair_tiles)
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
        TOGETHER=norm_heads_together, CAST=CAST_CODES[cast], PAIR_TILES=pair_tiles, BLOCK_T=block_t,
        BLOCK_HQ=block_hq, BLOCK_HK=block_hk, BLOCK_D=block_d, BLOCK_PASS=block_pass, INTERPRET=interpreting(),
        num_warps=num_warps, enable_fp_fusion=False)
    return grad_q, grad_k, dwq.sum(0).to(q_weight.dtype), dwk.sum(0).to(k_weight.dtype)
