"""Triton flash attention, forward and backward (FlashAttention-2 style), with the variants LLMs use: causal with
any query positions, sliding window, Gemma2 soft-capping, a bool or additive mask, gpt-oss attention sinks, GQA.

Semantics. q [B, Hq, S_q, D], k/v [B, Hkv, S_kv, D], any strides with a unit last stride (nothing is copied); q head
h reads kv head h // (Hq / Hkv). Key j sits at position j; query row i at q_pos[i] (default: bottom-right aligned,
S_kv - S_q + i). Key j is allowed for row i iff j <= q_pos[i] (causal), j > q_pos[i] - window (window > 0) and the
bool mask is True there. The score is s = scale * q.k (then softcap * tanh(s / softcap)), plus the additive mask;
the softmax runs over the allowed keys and the sink logit of the head (its probability is dropped). A row with
nothing to attend to yields out = 0 and lse = -inf, never NaN.

Program mapping. GQA groups are packed: a program owns one kv head of one batch row and BLOCK_M "stacked rows",
row t = i * G + g (query i, q head kv_head * G + g, G = Hq / Hkv), so every K/V tile it loads serves all G heads
(decode reads K/V once per group instead of G times, and tiles fill up even for one query). Forward and dQ:
grid (cdiv(S_q * G, BLOCK_M), Hkv, B), the latest (longest, under causal) row blocks first. dK/dV: grid
(cdiv(S_kv, BLOCK_N), Hkv, B); a program loops over the stacked rows of its kv head, so dK/dV are summed over
the group in registers: deterministic, no atomics.

Tile skipping. From the block's positions (tl.min / tl.max of q_pos: any order of positions is fine) the key range
that can be allowed is [min(q_pos) - window + 1, max(q_pos)]; tiles outside it are never visited, and tiles in
which every key is allowed for every row skip the position masks (three loops: masked edge, unmasked middle,
masked edge). The dK/dV kernel derives its row ranges the same way for the default (monotone) positions; with an
explicit q_pos it visits every row block and skips those outside the tile's range at run time. The bool and
additive masks are data: always applied, never used to skip (a finite additive mask such as finfo.min must act
exactly like eager softmax: a fully masked row is uniform over its keys). A bool mask that is one row of keys per
batch ([B, 1, 1, S_kv]: key padding, what the mask analysis gives for HF's causal + attention_mask) is different:
each batch row's allowed keys are reduced on the device to a range [first, end) and a has-holes flag
(_key_ranges). The range is positional, like causal: tiles outside it are skipped and its edge tiles masked, with
the plain case's tiles and no mask read. Rows with holes in their range take a second launch (MASK_KEY_HOLES) that
also loads the row of keys per tile and broadcasts it; each launch's programs skip the other's rows.

Numerics. Statistics and accumulators are fp32. The scale is folded with log2(e) into the scores so that the online
softmax runs on exp2, except with an additive mask: scores then stay in natural units and exp2 gets (s - m) * log2(e)
(finfo.min * log2(e) would overflow to -inf and turn eager's uniform row into an empty one). On a GPU q/k/v (and p,
dS) enter the dots in their own dtype (bf16/fp16 tensor cores, like FlashAttention); fp32 inputs use IEEE fp32
dots (eager uses no TF32). Under TRITON_INTERPRET=1 every operand is upcast to fp32 (the interpreter's bf16
arithmetic and dots are wrong) and roundings to bf16 go through `round_to`.

Backward. A dQ kernel per row block first computes delta = rowsum(dO * O) and stores it, then recomputes
p = exp(s - lse) per key tile: dS = p * (dP - delta) (times 1 - tanh^2 under softcap), dQ = scale * dS K.
The dK/dV kernel then reads delta: dV = P^T dO, dK = scale * dS^T Q. Sinks: d sink = -sum_i p_sink_i delta_i (per-row
terms written by the dQ kernel, summed by torch: deterministic). With an additive mask, lse alone cannot recover p
when the scores are huge (lse = finfo.min + log(n) rounds to finfo.min, and exp(s - lse) would be 1 for each of the
n keys of a fully masked row): the dQ kernel then also sums the recomputed p of each row and stores 1 / sum, which
rescales p in both kernels (a no-op, up to rounding, for ordinary rows).
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .common import (as_bytes, device_caps, exp_units, interpreting, round_to, size_hint, tanh_exp2, wrap_triton,
                     writes)

__all__ = ["attention_bwd", "attention_fwd"]

_LOG2E = tl.constexpr(1.4426950408889634)
_LN2 = tl.constexpr(0.6931471805599453)
MASK_NONE, MASK_BOOL, MASK_ADD = 0, 1, 2
# A bool per key, the same for every head and row (key padding): one launch takes the batch rows whose allowed keys
# are one contiguous range (KEYS: positional, no mask read), a second the rows with holes in it (KEY_HOLES).
MASK_KEYS, MASK_KEY_HOLES = 3, 4


# ----------------------------------------------------------------------------------------------------------- helpers
@triton.jit
def _mm(a, b, DOT_PRECISION: tl.constexpr):
    """DOT_PRECISION: "ieee" for fp32 inputs (and everything in the interpreter), full fp32 products; else the
    device's default, named (DeviceCaps.dot_precision): Ascend has no default to fall back on."""
    return tl.dot(a, b, input_precision=DOT_PRECISION, out_dtype=tl.float32)


@triton.jit
def _mma(a, b, acc, DOT_PRECISION: tl.constexpr):
    return tl.dot(a, b, acc, input_precision=DOT_PRECISION, out_dtype=tl.float32)


@triton.jit
def _operand(x, DTYPE: tl.constexpr, INTERPRET: tl.constexpr):
    """An fp32 tile (p, dS) as a dot operand: in the inputs' dtype on a GPU (tensor cores), fp32 when interpreting."""
    if INTERPRET:
        return x
    return x.to(DTYPE)


@triton.jit
def _load_rows(P, row_off, row_ok, D: tl.constexpr, BLOCK_D: tl.constexpr, INTERPRET: tl.constexpr):
    """[rows, BLOCK_D] tile of rows at P + row_off (int64), zero outside the rows and past D."""
    d = tl.arange(0, BLOCK_D)
    x = tl.load(P + row_off[:, None] + d[None, :], mask=row_ok[:, None] & (d < D)[None, :], other=0.0)
    if INTERPRET:  # the interpreter's bf16 dot multiplies bit patterns
        x = x.to(tl.float32)
    return x


@triton.jit
def _store_rows(P, row_off, row_ok, x, D: tl.constexpr, BLOCK_D: tl.constexpr, INTERPRET: tl.constexpr):
    d = tl.arange(0, BLOCK_D)
    tl.store(P + row_off[:, None] + d[None, :], round_to(x, P.dtype.element_ty, INTERPRET),
             mask=row_ok[:, None] & (d < D)[None, :])


@triton.jit
def _stacked_rows(t0, hkv, S_q, G: tl.constexpr, BLOCK_M: tl.constexpr):
    """Stacked rows t0 .. t0 + BLOCK_M: validity, query index (clamped into range, so padded rows borrow a real
    row's position and addresses stay in bounds) and q head. No tensor argument: its results address stores, and
    torch's write analysis would count any pointer argument of this call as written (kernels/common.py)."""
    t = t0 + tl.arange(0, BLOCK_M)
    row_ok = t < S_q * G
    i = tl.minimum(t // G, S_q - 1)
    h = hkv * G + t % G
    return row_ok, i.to(tl.int64), h.to(tl.int64)


@triton.jit
def _positions(QPOS, i, S_q, S_kv, HAS_QPOS: tl.constexpr):
    """The rows' query positions (int32): QPOS[i], or bottom-right aligned (the last query at the last key)."""
    if HAS_QPOS:
        qp = tl.load(QPOS + i).to(tl.int32)
    else:
        qp = (i + (S_kv - S_q)).to(tl.int32)
    return qp


@triton.jit
def _program_rows(pid0, pid1, pid2, grid0, S_q, G: tl.constexpr, BLOCK_M: tl.constexpr):
    """The (batch, kv head) and block of stacked rows (see _stacked_rows) of tile (pid0, pid1, pid2) of the grid
    (grid0 row blocks, kv heads, batch), the latest rows first: under causal they have the most keys, so the long
    blocks start early."""
    pid_m = grid0 - 1 - pid0
    hkv = pid1
    b = tl.cast(pid2, tl.int64)  # (an int in the interpreter's persistent loop)
    row_ok, i, h = _stacked_rows(pid_m * BLOCK_M, hkv, S_q, G, BLOCK_M)
    return b, hkv, row_ok, i, h


@triton.jit
def _key_tiles(qp, key_lo, key_hi, window, CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, BLOCK_N: tl.constexpr):
    """For a block of rows at positions qp and the keys [key_lo, key_hi) (all keys, or a key mask's range):
    (lo, full_lo, full_hi, hi), multiples of BLOCK_N. Keys outside [lo, hi) are masked for every row; in
    [full_lo, full_hi) every key is allowed (positionally) for every row."""
    qp_min = tl.min(qp, axis=0)
    qp_max = tl.max(qp, axis=0)
    lo = key_lo
    full_lo = key_lo
    hi = key_hi
    full_hi = key_hi
    if CAUSAL:  # key j <= q_pos
        hi = tl.minimum(hi, tl.maximum(qp_max + 1, 0))
        full_hi = tl.minimum(full_hi, tl.maximum(qp_min + 1, 0))
    if HAS_WINDOW:  # key j > q_pos - window
        lo = tl.maximum(qp_min - window + 1, lo)
        full_lo = tl.maximum(qp_max - window + 1, full_lo)
    lo = lo // BLOCK_N * BLOCK_N
    hi = tl.maximum(tl.cdiv(hi, BLOCK_N) * BLOCK_N, lo)
    full_lo = tl.minimum(tl.maximum(tl.cdiv(full_lo, BLOCK_N) * BLOCK_N, lo), hi)
    full_hi = tl.minimum(tl.maximum(full_hi // BLOCK_N * BLOCK_N, full_lo), hi)
    return lo, full_lo, full_hi, hi


@triton.jit
def _mask_row(b, h, i, smb, smh, sms, MASK_KIND: tl.constexpr):
    """The mask's offset of each stacked row; a key mask's is the batch's alone (a scalar)."""
    if MASK_KIND >= 3:
        off = b * smb
    else:
        off = b * smb + h * smh + i * sms
    return off


@triton.jit
def _key_range(KRANGE, b, srb, S_kv, MASK_KIND: tl.constexpr):
    """(key_lo, key_hi, mine): the keys [key_lo, key_hi) hold every key batch row b may attend -- a key mask's
    range (KRANGE [B, 3] int32: first, end, holes; batch stride srb), else all S_kv keys. The range is positional:
    tiles outside it are skipped and its edges masked like causal's. `mine`: whether this launch takes the row
    (KEYS the rows without holes, KEY_HOLES those with); for the other launch's rows the range is empty and
    nothing may be stored."""
    if MASK_KIND >= 3:
        key_lo = tl.load(KRANGE + b * srb)
        key_hi = tl.load(KRANGE + b * srb + 1)
        holes = tl.load(KRANGE + b * srb + 2)
        if MASK_KIND == 3:
            mine = holes == 0
        else:
            mine = holes != 0
        key_hi = tl.where(mine, key_hi, key_lo)
    else:
        key_lo = 0
        key_hi = S_kv
        mine = True
    return key_lo, key_hi, mine


@triton.jit
def _key_ok(kp, key_lo, key_hi, MASK_KIND: tl.constexpr):
    """Keys kp in [key_lo, key_hi); without a key mask the range starts at 0 and only its end is compared."""
    if MASK_KIND >= 3:
        ok = (kp >= key_lo) & (kp < key_hi)
    else:
        ok = kp < key_hi
    return ok


@triton.jit
def _key_row(MASK, m_row, n0, smk, key_hi, MASK_KIND: tl.constexpr, KEYS_FIRST: tl.constexpr, BLOCK_N: tl.constexpr):
    """KEY_HOLES: the key mask's bytes for the keys [n0, n0 + BLOCK_N) (0 from key_hi on) as a [1, keys] tile
    (KEYS_FIRST: [keys, 1]), broadcast over the rows; other kinds: a placeholder 0."""
    if MASK_KIND == 4:
        kp = n0 + tl.arange(0, BLOCK_N)
        row = tl.load(MASK + m_row + kp.to(tl.int64) * smk, mask=kp < key_hi, other=0)
        if KEYS_FIRST:
            row = row[:, None]
        else:
            row = row[None, :]
    else:
        row = 0
    return row


@triton.jit
def _mask_tile(m_row, kpl, smk, row_ok, kv_ok, MASK_KIND: tl.constexpr, KEYS_FIRST: tl.constexpr):
    """Offsets and load mask of a [rows, keys] (KEYS_FIRST: [keys, rows]) tile of a bool / additive mask; a key
    mask has its row loaded apart (_key_row), no mask needs none: placeholders."""
    if (MASK_KIND == 0) | (MASK_KIND >= 3):
        off = 0
        ok = False
    elif KEYS_FIRST:
        off = m_row[None, :] + kpl[:, None] * smk
        ok = kv_ok[:, None] & row_ok[None, :]
    else:
        off = m_row[:, None] + kpl[None, :] * smk
        ok = row_ok[:, None] & kv_ok[None, :]
    return off, ok


@triton.jit
def _scores(qk, qp, kp, kv_ok, MASK, m_off, m_ok, keys, scale, softcap, window,
            MASKED: tl.constexpr, CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_SOFTCAP: tl.constexpr,
            MASK_KIND: tl.constexpr):
    """Scores of a tile from the fp32 q.k products, in the softmax's units: log2 units (scale * log2 e folded in),
    natural units with an additive mask. qp / kp (query / key positions), kv_ok (key < S_kv) and the mask's offsets
    and load mask are 2-D broadcastable, in either orientation ([rows, keys] or [keys, rows]); `keys` is a key
    mask's row (KEY_HOLES), broadcastable the same way (KEYS: its range, in kv_ok and the tile ranges, is all of
    it). Disallowed: -inf. Also returns tanh(s / softcap) (for the backward; 0 without softcap)."""
    NATURAL: tl.constexpr = MASK_KIND == 2
    UNIT: tl.constexpr = 1.0 if NATURAL else _LOG2E
    if HAS_SOFTCAP:
        t = tanh_exp2(qk * (scale / softcap))
        s = t * (softcap * UNIT)
    else:
        t = 0.0
        s = qk * (scale * UNIT)
    if MASK_KIND == 1:
        allowed = tl.load(MASK + m_off, mask=m_ok, other=0)
        s = tl.where(allowed != 0, s, float("-inf"))
    elif MASK_KIND == 4:
        s = tl.where(keys != 0, s, float("-inf"))
    elif MASK_KIND == 2:
        s += tl.load(MASK + m_off, mask=m_ok, other=0.0).to(tl.float32)
    if MASKED:
        ok = kv_ok
        if CAUSAL:
            ok = ok & (kp <= qp)
        if HAS_WINDOW:
            ok = ok & (kp > qp - window)
        s = tl.where(ok, s, float("-inf"))
    return s, t


# ----------------------------------------------------------------------------------------------------------- forward
@triton.jit
def _fwd_tile(acc, m_i, l_i, n0, q, K, V, k_base, v_base, qp, row_ok, MASK, m_row, smk, scale, softcap,
              window, key_lo, key_hi, sks, svs, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
              HAS_WINDOW: tl.constexpr, HAS_SOFTCAP: tl.constexpr, MASK_KIND: tl.constexpr, D: tl.constexpr,
              BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, INTERPRET: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """One key tile of the online softmax: acc/m_i/l_i updated (m_i in the scores' units)."""
    NATURAL: tl.constexpr = MASK_KIND == 2
    keys = _key_row(MASK, m_row, n0, smk, key_hi, MASK_KIND, False, BLOCK_N)
    kp = n0 + tl.arange(0, BLOCK_N)
    kv_ok = _key_ok(kp, key_lo, key_hi, MASK_KIND)
    kpl = kp.to(tl.int64)
    k = _load_rows(K, k_base + kpl * sks, kv_ok, D, BLOCK_D, INTERPRET)
    qk = _mm(q, tl.trans(k), DOT_PRECISION)
    m_off, m_ok = _mask_tile(m_row, kpl, smk, row_ok, kv_ok, MASK_KIND, False)
    s, _ = _scores(qk, qp[:, None], kp[None, :], kv_ok[None, :], MASK, m_off, m_ok, keys,
                   scale, softcap, window, MASKED, CAUSAL, HAS_WINDOW, HAS_SOFTCAP, MASK_KIND)
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing allowed yet: no -inf - -inf
    alpha = exp_units(m_i - m_use, NATURAL)
    p = exp_units(s - m_use[:, None], NATURAL)
    l_i = l_i * alpha + tl.sum(p, axis=1)
    v = _load_rows(V, v_base + kpl * svs, kv_ok, D, BLOCK_D, INTERPRET)
    acc = _mma(_operand(p, V.dtype.element_ty, INTERPRET), v, acc * alpha[:, None], DOT_PRECISION)
    return acc, m_new, l_i


@writes("OUT", "LSE")
@triton.jit
def _fwd_kernel(Q, K, V, OUT, LSE, QPOS, MASK, KRANGE, SINKS, scale, softcap, window, S_q, S_kv,
                sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, smb, smh, sms, smk, srb,
                HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr,
                CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_QPOS: tl.constexpr,
                MASK_KIND: tl.constexpr, HAS_SINKS: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, INTERPRET: tl.constexpr,
                DOT_PRECISION: tl.constexpr, batch, PERSISTENT: tl.constexpr):
    """OUT [B, HQ, S_q, D] and LSE [B, HQ, S_q] contiguous. One program: BLOCK_M stacked rows of one kv head."""
    if PERSISTENT:  # one program per core, each taking every num_programs-th tile
        grid0, grid1 = tl.cdiv(S_q * (HQ // HKV), BLOCK_M), HKV
        for task in range(tl.program_id(0), grid0 * grid1 * batch, tl.num_programs(0)):
            _fwd_block(task % grid0, task // grid0 % grid1, task // (grid0 * grid1), grid0, Q, K, V, OUT, LSE, QPOS,
                       MASK, KRANGE, SINKS, scale, softcap, window, S_q, S_kv, sqb, sqh, sqs, skb, skh, sks, svb, svh,
                       svs, smb, smh, sms, smk, srb, HQ, HKV, D, CAUSAL, HAS_WINDOW, HAS_SOFTCAP, HAS_QPOS, MASK_KIND,
                       HAS_SINKS, BLOCK_M, BLOCK_N, BLOCK_D, INTERPRET, DOT_PRECISION)
    else:
        _fwd_block(tl.program_id(0), tl.program_id(1), tl.program_id(2), tl.num_programs(0), Q, K, V, OUT, LSE, QPOS,
                   MASK, KRANGE, SINKS, scale, softcap, window, S_q, S_kv, sqb, sqh, sqs, skb, skh, sks, svb, svh, svs,
                   smb, smh, sms, smk, srb, HQ, HKV, D, CAUSAL, HAS_WINDOW, HAS_SOFTCAP, HAS_QPOS, MASK_KIND, HAS_SINKS,
                   BLOCK_M, BLOCK_N, BLOCK_D, INTERPRET, DOT_PRECISION)


@triton.jit
def _fwd_block(pid0, pid1, pid2, grid0, Q, K, V, OUT, LSE, QPOS, MASK, KRANGE, SINKS, scale, softcap, window, S_q, S_kv,
               sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, smb, smh, sms, smk, srb, HQ: tl.constexpr,
               HKV: tl.constexpr, D: tl.constexpr, CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr,
               HAS_SOFTCAP: tl.constexpr, HAS_QPOS: tl.constexpr, MASK_KIND: tl.constexpr, HAS_SINKS: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, INTERPRET: tl.constexpr,
               DOT_PRECISION: tl.constexpr):
    G: tl.constexpr = HQ // HKV
    NATURAL: tl.constexpr = MASK_KIND == 2
    UNIT: tl.constexpr = 1.0 if NATURAL else _LOG2E
    scale = tl.cast(scale, tl.float32)
    softcap = tl.cast(softcap, tl.float32)
    b, hkv, row_ok, i, h = _program_rows(pid0, pid1, pid2, grid0, S_q, G, BLOCK_M)
    qp = _positions(QPOS, i, S_q, S_kv, HAS_QPOS)
    key_lo, key_hi, mine = _key_range(KRANGE, b, srb, S_kv, MASK_KIND)
    if MASK_KIND >= 3:
        row_ok = tl.where(mine, row_ok, False)  # the other launch's rows: nothing loaded, nothing stored

    q = _load_rows(Q, b * sqb + h * sqh + i * sqs, row_ok, D, BLOCK_D, INTERPRET)
    k_base = b * skb + tl.cast(hkv, tl.int64) * skh
    v_base = b * svb + tl.cast(hkv, tl.int64) * svh
    m_row = _mask_row(b, h, i, smb, smh, sms, MASK_KIND)
    if HAS_SINKS:  # the sink's logit starts the running max, its exp(0) = 1 the running sum
        m_i = tl.load(SINKS + h).to(tl.float32) * UNIT
        l_i = tl.full([BLOCK_M], 1.0, dtype=tl.float32)
    else:
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    lo, full_lo, full_hi, hi = _key_tiles(qp, key_lo, key_hi, window, CAUSAL, HAS_WINDOW, BLOCK_N)
    for n0 in range(lo, full_lo, BLOCK_N):  # window edge, a key range's first tile
        acc, m_i, l_i = _fwd_tile(acc, m_i, l_i, n0, q, K, V, k_base, v_base, qp, row_ok, MASK, m_row, smk, scale,
                                  softcap, window, key_lo, key_hi, sks, svs, True, CAUSAL, HAS_WINDOW, HAS_SOFTCAP,
                                  MASK_KIND, D, BLOCK_N, BLOCK_D, INTERPRET, DOT_PRECISION)
    for n0 in range(full_lo, full_hi, BLOCK_N):  # every key allowed: no position masks
        acc, m_i, l_i = _fwd_tile(acc, m_i, l_i, n0, q, K, V, k_base, v_base, qp, row_ok, MASK, m_row, smk, scale,
                                  softcap, window, key_lo, key_hi, sks, svs, False, CAUSAL, HAS_WINDOW, HAS_SOFTCAP,
                                  MASK_KIND, D, BLOCK_N, BLOCK_D, INTERPRET, DOT_PRECISION)
    for n0 in range(full_hi, hi, BLOCK_N):  # causal diagonal and the last, partial tile
        acc, m_i, l_i = _fwd_tile(acc, m_i, l_i, n0, q, K, V, k_base, v_base, qp, row_ok, MASK, m_row, smk, scale,
                                  softcap, window, key_lo, key_hi, sks, svs, True, CAUSAL, HAS_WINDOW, HAS_SOFTCAP,
                                  MASK_KIND, D, BLOCK_N, BLOCK_D, INTERPRET, DOT_PRECISION)

    has_mass = l_i > 0.0  # false only without a sink and without any allowed key
    out = acc / tl.where(has_mass, l_i, 1.0)[:, None]
    lse = m_i * (1.0 / UNIT) + tl.log2(tl.where(has_mass, l_i, 1.0)) * _LN2
    lse = tl.where(has_mass, lse, float("-inf"))
    stat = (b * HQ + h) * S_q + i
    _store_rows(OUT, stat * D, row_ok, out, D, BLOCK_D, INTERPRET)
    tl.store(LSE + stat, lse, mask=row_ok)


# ---------------------------------------------------------------------------------------------------------- backward
@triton.jit
def _bwd_dq_tile(dq, l_sum, n0, q, do, lse_u, delta, K, V, k_base, v_base, qp, row_ok, MASK, m_row, smk,
                 scale, softcap, window, key_lo, key_hi, sks, svs, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                 HAS_WINDOW: tl.constexpr, HAS_SOFTCAP: tl.constexpr, MASK_KIND: tl.constexpr, D: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, INTERPRET: tl.constexpr, DOT_PRECISION: tl.constexpr):
    keys = _key_row(MASK, m_row, n0, smk, key_hi, MASK_KIND, False, BLOCK_N)
    kp = n0 + tl.arange(0, BLOCK_N)
    kv_ok = _key_ok(kp, key_lo, key_hi, MASK_KIND)
    kpl = kp.to(tl.int64)
    k = _load_rows(K, k_base + kpl * sks, kv_ok, D, BLOCK_D, INTERPRET)
    v = _load_rows(V, v_base + kpl * svs, kv_ok, D, BLOCK_D, INTERPRET)
    qk = _mm(q, tl.trans(k), DOT_PRECISION)
    m_off, m_ok = _mask_tile(m_row, kpl, smk, row_ok, kv_ok, MASK_KIND, False)
    s, t = _scores(qk, qp[:, None], kp[None, :], kv_ok[None, :], MASK, m_off, m_ok, keys,
                   scale, softcap, window, MASKED, CAUSAL, HAS_WINDOW, HAS_SOFTCAP, MASK_KIND)
    p = exp_units(s - lse_u[:, None], MASK_KIND == 2)
    l_sum += tl.sum(p, axis=1)
    dp = _mm(do, tl.trans(v), DOT_PRECISION)
    ds = p * (dp - delta[:, None])
    if HAS_SOFTCAP:
        ds = ds * (1.0 - t * t)
    dq = _mma(_operand(ds, K.dtype.element_ty, INTERPRET), k, dq, DOT_PRECISION)
    return dq, l_sum


@writes("DQ", "DELTA", RNORM=lambda a: a["MASK_KIND"] == 2, PSINK="HAS_SINKS")
@triton.jit
def _bwd_dq_kernel(Q, K, V, OUT, DO, LSE, DELTA, RNORM, PSINK, DQ, QPOS, MASK, KRANGE, SINKS, scale, softcap,
                   window, S_q, S_kv, sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sob, soh, sos, sdb, sdh, sds,
                   smb, smh, sms, smk, srb,
                   HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr,
                   CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_QPOS: tl.constexpr,
                   MASK_KIND: tl.constexpr, HAS_SINKS: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, INTERPRET: tl.constexpr,
                   DOT_PRECISION: tl.constexpr, batch, PERSISTENT: tl.constexpr):
    """DQ [B, HQ, S_q, D] contiguous; writes DELTA (and RNORM with an additive mask, PSINK = p_sink * delta with
    sinks), [B, HQ, S_q] fp32, for the dK/dV kernel and the sink gradient. (sob..) are OUT's strides, (sdb..) DO's."""
    if PERSISTENT:  # one program per core, each taking every num_programs-th tile
        grid0, grid1 = tl.cdiv(S_q * (HQ // HKV), BLOCK_M), HKV
        for task in range(tl.program_id(0), grid0 * grid1 * batch, tl.num_programs(0)):
            _bwd_dq_block(task % grid0, task // grid0 % grid1, task // (grid0 * grid1), grid0, Q, K, V, OUT, DO, LSE,
                          DELTA, RNORM, PSINK, DQ, QPOS, MASK, KRANGE, SINKS, scale, softcap, window, S_q, S_kv, sqb,
                          sqh, sqs, skb, skh, sks, svb, svh, svs, sob, soh, sos, sdb, sdh, sds, smb, smh, sms, smk, srb,
                          HQ, HKV, D, CAUSAL, HAS_WINDOW, HAS_SOFTCAP, HAS_QPOS, MASK_KIND, HAS_SINKS, BLOCK_M, BLOCK_N,
                          BLOCK_D, INTERPRET, DOT_PRECISION)
    else:
        _bwd_dq_block(tl.program_id(0), tl.program_id(1), tl.program_id(2), tl.num_programs(0), Q, K, V, OUT, DO, LSE,
                      DELTA, RNORM, PSINK, DQ, QPOS, MASK, KRANGE, SINKS, scale, softcap, window, S_q, S_kv, sqb, sqh,
                      sqs, skb, skh, sks, svb, svh, svs, sob, soh, sos, sdb, sdh, sds, smb, smh, sms, smk, srb, HQ, HKV,
                      D, CAUSAL, HAS_WINDOW, HAS_SOFTCAP, HAS_QPOS, MASK_KIND, HAS_SINKS, BLOCK_M, BLOCK_N, BLOCK_D,
                      INTERPRET, DOT_PRECISION)


@triton.jit
def _bwd_dq_block(pid0, pid1, pid2, grid0, Q, K, V, OUT, DO, LSE, DELTA, RNORM, PSINK, DQ, QPOS, MASK, KRANGE, SINKS,
                  scale, softcap, window, S_q, S_kv, sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sob, soh, sos, sdb,
                  sdh, sds, smb, smh, sms, smk, srb, HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr,
                  CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_QPOS: tl.constexpr,
                  MASK_KIND: tl.constexpr, HAS_SINKS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_D: tl.constexpr, INTERPRET: tl.constexpr, DOT_PRECISION: tl.constexpr):
    G: tl.constexpr = HQ // HKV
    NATURAL: tl.constexpr = MASK_KIND == 2
    UNIT: tl.constexpr = 1.0 if NATURAL else _LOG2E
    scale = tl.cast(scale, tl.float32)
    softcap = tl.cast(softcap, tl.float32)
    b, hkv, row_ok, i, h = _program_rows(pid0, pid1, pid2, grid0, S_q, G, BLOCK_M)
    qp = _positions(QPOS, i, S_q, S_kv, HAS_QPOS)
    key_lo, key_hi, mine = _key_range(KRANGE, b, srb, S_kv, MASK_KIND)
    if MASK_KIND >= 3:
        row_ok = tl.where(mine, row_ok, False)  # the other launch's rows: nothing loaded, nothing stored

    q = _load_rows(Q, b * sqb + h * sqh + i * sqs, row_ok, D, BLOCK_D, INTERPRET)
    do = _load_rows(DO, b * sdb + h * sdh + i * sds, row_ok, D, BLOCK_D, INTERPRET)
    o = _load_rows(OUT, b * sob + h * soh + i * sos, row_ok, D, BLOCK_D, INTERPRET)
    delta = tl.sum(do.to(tl.float32) * o.to(tl.float32), axis=1)  # rowsum(dO * O), zero on padded rows
    stat = (b * HQ + h) * S_q + i
    tl.store(DELTA + stat, delta, mask=row_ok)
    # gather: one statistic per stacked row (rows interleave the group's heads), BLOCK_M values a tile
    lse = tl.load(LSE + stat, mask=row_ok, other=0.0)  # gather
    lse_u = tl.where(lse == float("-inf"), 0.0, lse) * UNIT  # empty rows: every score is -inf, p = 0
    k_base = b * skb + tl.cast(hkv, tl.int64) * skh
    v_base = b * svb + tl.cast(hkv, tl.int64) * svh
    m_row = _mask_row(b, h, i, smb, smh, sms, MASK_KIND)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    l_sum = tl.zeros([BLOCK_M], dtype=tl.float32)

    lo, full_lo, full_hi, hi = _key_tiles(qp, key_lo, key_hi, window, CAUSAL, HAS_WINDOW, BLOCK_N)
    for n0 in range(lo, full_lo, BLOCK_N):
        dq, l_sum = _bwd_dq_tile(dq, l_sum, n0, q, do, lse_u, delta, K, V, k_base, v_base, qp, row_ok, MASK, m_row, smk,
                                 scale, softcap, window, key_lo, key_hi, sks, svs, True, CAUSAL, HAS_WINDOW,
                                 HAS_SOFTCAP, MASK_KIND, D, BLOCK_N, BLOCK_D, INTERPRET, DOT_PRECISION)
    for n0 in range(full_lo, full_hi, BLOCK_N):
        dq, l_sum = _bwd_dq_tile(dq, l_sum, n0, q, do, lse_u, delta, K, V, k_base, v_base, qp, row_ok, MASK, m_row, smk,
                                 scale, softcap, window, key_lo, key_hi, sks, svs, False, CAUSAL, HAS_WINDOW,
                                 HAS_SOFTCAP, MASK_KIND, D, BLOCK_N, BLOCK_D, INTERPRET, DOT_PRECISION)
    for n0 in range(full_hi, hi, BLOCK_N):
        dq, l_sum = _bwd_dq_tile(dq, l_sum, n0, q, do, lse_u, delta, K, V, k_base, v_base, qp, row_ok, MASK, m_row, smk,
                                 scale, softcap, window, key_lo, key_hi, sks, svs, True, CAUSAL, HAS_WINDOW,
                                 HAS_SOFTCAP, MASK_KIND, D, BLOCK_N, BLOCK_D, INTERPRET, DOT_PRECISION)

    if HAS_SINKS:
        p_sink = exp_units(tl.load(SINKS + h).to(tl.float32) * UNIT - lse_u, NATURAL)
        l_sum += p_sink
    if NATURAL:  # 1 / sum of the recomputed p: exact normalisation even where lse lost log(l) to rounding
        r_norm = tl.where(l_sum > 0.0, 1.0 / l_sum, 0.0)
        dq = dq * r_norm[:, None]
        tl.store(RNORM + stat, r_norm, mask=row_ok)
        if HAS_SINKS:
            p_sink = p_sink * r_norm
    if HAS_SINKS:
        tl.store(PSINK + stat, p_sink * delta, mask=row_ok)
    _store_rows(DQ, stat * D, row_ok, dq * scale, D, BLOCK_D, INTERPRET)


@triton.jit
def _bwd_kv_tile(dk, dv, k, v, t0, hkv, b, kp, kv_ok, keys, Q, DO, LSE, DELTA, RNORM, QPOS, MASK, scale, softcap,
                 window,
                 S_q, S_kv, sqb, sqh, sqs, sdb, sdh, sds, smb, smh, sms, smk,
                 HQ: tl.constexpr, G: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                 HAS_WINDOW: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_QPOS: tl.constexpr,
                 MASK_KIND: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
                 INTERPRET: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """One block of stacked rows against the program's key tile, in the transposed orientation ([keys, rows]) so
    that p^T and dS^T come out of the dots as the operands of dV += p^T dO and dK += dS^T Q."""
    NATURAL: tl.constexpr = MASK_KIND == 2
    UNIT: tl.constexpr = 1.0 if NATURAL else _LOG2E
    row_ok, i, h = _stacked_rows(t0, hkv, S_q, G, BLOCK_M)
    qp = _positions(QPOS, i, S_q, S_kv, HAS_QPOS)
    q = _load_rows(Q, b * sqb + h * sqh + i * sqs, row_ok, D, BLOCK_D, INTERPRET)
    do = _load_rows(DO, b * sdb + h * sdh + i * sds, row_ok, D, BLOCK_D, INTERPRET)
    stat = (b * HQ + h) * S_q + i
    lse = tl.load(LSE + stat, mask=row_ok, other=0.0)  # gather (as in the dQ kernel)
    lse_u = tl.where(lse == float("-inf"), 0.0, lse) * UNIT
    delta = tl.load(DELTA + stat, mask=row_ok, other=0.0)  # gather; 0 on padded rows: with dO = 0 they add nothing
    kpl = kp.to(tl.int64)
    m_row = _mask_row(b, h, i, smb, smh, sms, MASK_KIND)
    qk_t = _mm(k, tl.trans(q), DOT_PRECISION)
    m_off, m_ok = _mask_tile(m_row, kpl, smk, row_ok, kv_ok, MASK_KIND, True)
    s_t, t_t = _scores(qk_t, qp[None, :], kp[:, None], kv_ok[:, None], MASK, m_off, m_ok,
                       keys, scale, softcap, window,
                       MASKED, CAUSAL, HAS_WINDOW, HAS_SOFTCAP, MASK_KIND)
    p_t = exp_units(s_t - lse_u[None, :], NATURAL)
    if NATURAL:
        p_t = p_t * tl.load(RNORM + stat, mask=row_ok, other=0.0)[None, :]
    dv = _mma(_operand(p_t, DO.dtype.element_ty, INTERPRET), do, dv, DOT_PRECISION)
    dp_t = _mm(v, tl.trans(do), DOT_PRECISION)
    ds_t = p_t * (dp_t - delta[None, :])
    if HAS_SOFTCAP:
        ds_t = ds_t * (1.0 - t_t * t_t)
    dk = _mma(_operand(ds_t, Q.dtype.element_ty, INTERPRET), q, dk, DOT_PRECISION)
    return dk, dv


@triton.jit
def _row_blocks(n0, S_q, S_kv, key_lo, key_hi, window, G: tl.constexpr, CAUSAL: tl.constexpr,
                HAS_WINDOW: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """For the key tile [n0, n0 + BLOCK_N) and the default positions (query i at S_kv - S_q + i, increasing):
    (lo, full_lo, full_hi, hi) in stacked rows, multiples of BLOCK_M. Rows outside [lo, hi) see no key of the
    tile; rows in [full_lo, full_hi) see all of them. A tile with keys outside [key_lo, key_hi) (the last, partial
    tile; a key mask's range edges) has no full rows: its keys past S_kv (zero K/V rows) would only feed dK/dV rows
    that are never stored, but their p = exp(0 - lse) can overflow."""
    off = S_kv - S_q
    last = tl.minimum(n0 + BLOCK_N, S_kv) - 1  # the tile's last real key
    i_lo = 0
    i_hi = S_q
    f_lo = 0
    f_hi = S_q
    if CAUSAL:  # some key iff position >= n0; all keys iff position >= last
        i_lo = tl.minimum(tl.maximum(n0 - off, 0), S_q)
        f_lo = tl.minimum(tl.maximum(last - off, 0), S_q)
    if HAS_WINDOW:  # some key iff position - window < last; all keys iff position - window < n0
        i_hi = tl.minimum(tl.maximum(last + window - off, 0), S_q)
        f_hi = tl.minimum(tl.maximum(n0 + window - off, 0), S_q)
    f_hi = tl.where((n0 >= key_lo) & (n0 + BLOCK_N <= key_hi), f_hi, 0)  # a key of the tile is out of range
    lo = i_lo * G // BLOCK_M * BLOCK_M
    hi = tl.maximum(tl.cdiv(i_hi * G, BLOCK_M) * BLOCK_M, lo)
    full_lo = tl.minimum(tl.maximum(tl.cdiv(f_lo * G, BLOCK_M) * BLOCK_M, lo), hi)
    full_hi = tl.minimum(tl.maximum(f_hi * G // BLOCK_M * BLOCK_M, full_lo), hi)
    return lo, full_lo, full_hi, hi


@writes("DK", "DV")
@triton.jit
def _bwd_dkdv_kernel(Q, K, V, DO, LSE, DELTA, RNORM, DK, DV, QPOS, MASK, KRANGE, scale, softcap, window, S_q, S_kv,
                     sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sdb, sdh, sds, smb, smh, sms, smk, srb,
                     HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr,
                     CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_SOFTCAP: tl.constexpr,
                     HAS_QPOS: tl.constexpr, MASK_KIND: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, INTERPRET: tl.constexpr,
                     DOT_PRECISION: tl.constexpr, batch, PERSISTENT: tl.constexpr):
    """DK / DV [B, HKV, S_kv, D] contiguous. One program: one key tile of one kv head, all rows of its group."""
    if PERSISTENT:  # one program per core, each taking every num_programs-th tile
        grid0, grid1 = tl.cdiv(S_kv, BLOCK_N), HKV
        for task in range(tl.program_id(0), grid0 * grid1 * batch, tl.num_programs(0)):
            _bwd_dkdv_block(task % grid0, task // grid0 % grid1, task // (grid0 * grid1), grid0, Q, K, V, DO, LSE,
                            DELTA, RNORM, DK, DV, QPOS, MASK, KRANGE, scale, softcap, window, S_q, S_kv, sqb, sqh, sqs,
                            skb, skh, sks, svb, svh, svs, sdb, sdh, sds, smb, smh, sms, smk, srb, HQ, HKV, D, CAUSAL,
                            HAS_WINDOW, HAS_SOFTCAP, HAS_QPOS, MASK_KIND, BLOCK_M, BLOCK_N, BLOCK_D, INTERPRET,
                            DOT_PRECISION)
    else:
        _bwd_dkdv_block(tl.program_id(0), tl.program_id(1), tl.program_id(2), tl.num_programs(0), Q, K, V, DO, LSE,
                        DELTA, RNORM, DK, DV, QPOS, MASK, KRANGE, scale, softcap, window, S_q, S_kv, sqb, sqh, sqs, skb,
                        skh, sks, svb, svh, svs, sdb, sdh, sds, smb, smh, sms, smk, srb, HQ, HKV, D, CAUSAL, HAS_WINDOW,
                        HAS_SOFTCAP, HAS_QPOS, MASK_KIND, BLOCK_M, BLOCK_N, BLOCK_D, INTERPRET, DOT_PRECISION)


@triton.jit
def _bwd_dkdv_block(pid0, pid1, pid2, grid0, Q, K, V, DO, LSE, DELTA, RNORM, DK, DV, QPOS, MASK, KRANGE, scale, softcap,
                    window, S_q, S_kv, sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sdb, sdh, sds, smb, smh, sms, smk,
                    srb, HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, CAUSAL: tl.constexpr,
                    HAS_WINDOW: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_QPOS: tl.constexpr,
                    MASK_KIND: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                    INTERPRET: tl.constexpr, DOT_PRECISION: tl.constexpr):
    G: tl.constexpr = HQ // HKV
    scale = tl.cast(scale, tl.float32)
    softcap = tl.cast(softcap, tl.float32)
    n0 = pid0 * BLOCK_N
    hkv = pid1
    b = tl.cast(pid2, tl.int64)  # (an int in the interpreter's persistent loop)
    kp = n0 + tl.arange(0, BLOCK_N)
    key_lo, key_hi, mine = _key_range(KRANGE, b, srb, S_kv, MASK_KIND)
    kv_ok = _key_ok(kp, key_lo, key_hi, MASK_KIND)  # keys outside a key mask's range: masked like keys past S_kv
    kpl = kp.to(tl.int64)
    k = _load_rows(K, b * skb + tl.cast(hkv, tl.int64) * skh + kpl * sks, kv_ok, D, BLOCK_D, INTERPRET)
    v = _load_rows(V, b * svb + tl.cast(hkv, tl.int64) * svh + kpl * svs, kv_ok, D, BLOCK_D, INTERPRET)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    keys = _key_row(MASK, b * smb, n0, smk, key_hi, MASK_KIND, True, BLOCK_N)  # this program's key tile: once

    if (n0 >= key_hi) | (n0 + BLOCK_N <= key_lo):
        pass  # no key of this tile is in the key mask's range (or the row is the other launch's): dK = dV = 0
    elif HAS_QPOS:  # positions in any order: visit every row block, skip those that cannot see this tile
        last = tl.minimum(n0 + BLOCK_N, S_kv) - 1
        for t0 in range(0, S_q * G, BLOCK_M):
            row_ok, i, _ = _stacked_rows(t0, hkv, S_q, G, BLOCK_M)
            qp = _positions(QPOS, i, S_q, S_kv, HAS_QPOS)
            live = True
            if CAUSAL:
                live = live & (tl.max(qp, axis=0) >= n0)
            if HAS_WINDOW:
                live = live & (tl.min(qp, axis=0) - window < last)
            if live:
                dk, dv = _bwd_kv_tile(dk, dv, k, v, t0, hkv, b, kp, kv_ok, keys, Q, DO, LSE, DELTA, RNORM, QPOS, MASK,
                                      scale, softcap, window, S_q, S_kv, sqb, sqh, sqs, sdb, sdh, sds, smb, smh, sms,
                                      smk, HQ, G, True, CAUSAL, HAS_WINDOW, HAS_SOFTCAP, HAS_QPOS, MASK_KIND, D,
                                      BLOCK_M, BLOCK_D, INTERPRET, DOT_PRECISION)
    else:
        lo, full_lo, full_hi, hi = _row_blocks(n0, S_q, S_kv, key_lo, key_hi, window, G, CAUSAL, HAS_WINDOW,
                                               BLOCK_M, BLOCK_N)
        for t0 in range(lo, full_lo, BLOCK_M):  # window edge
            dk, dv = _bwd_kv_tile(dk, dv, k, v, t0, hkv, b, kp, kv_ok, keys, Q, DO, LSE, DELTA, RNORM, QPOS, MASK,
                                  scale, softcap, window, S_q, S_kv, sqb, sqh, sqs, sdb, sdh, sds, smb, smh, sms, smk,
                                  HQ, G, True, CAUSAL, HAS_WINDOW, HAS_SOFTCAP, HAS_QPOS, MASK_KIND, D, BLOCK_M,
                                  BLOCK_D, INTERPRET, DOT_PRECISION)
        for t0 in range(full_lo, full_hi, BLOCK_M):  # every row sees every key: no position masks
            dk, dv = _bwd_kv_tile(dk, dv, k, v, t0, hkv, b, kp, kv_ok, keys, Q, DO, LSE, DELTA, RNORM, QPOS, MASK,
                                  scale, softcap, window, S_q, S_kv, sqb, sqh, sqs, sdb, sdh, sds, smb, smh, sms, smk,
                                  HQ, G, False, CAUSAL, HAS_WINDOW, HAS_SOFTCAP, HAS_QPOS, MASK_KIND, D, BLOCK_M,
                                  BLOCK_D, INTERPRET, DOT_PRECISION)
        for t0 in range(full_hi, hi, BLOCK_M):  # causal diagonal, the last (partial) row block
            dk, dv = _bwd_kv_tile(dk, dv, k, v, t0, hkv, b, kp, kv_ok, keys, Q, DO, LSE, DELTA, RNORM, QPOS, MASK,
                                  scale, softcap, window, S_q, S_kv, sqb, sqh, sqs, sdb, sdh, sds, smb, smh, sms, smk,
                                  HQ, G, True, CAUSAL, HAS_WINDOW, HAS_SOFTCAP, HAS_QPOS, MASK_KIND, D, BLOCK_M,
                                  BLOCK_D, INTERPRET, DOT_PRECISION)

    out = ((b * HKV + hkv) * S_kv + kpl) * D
    store = kp < S_kv
    if MASK_KIND >= 3:
        store = tl.where(mine, store, False)
    _store_rows(DK, out, store, dk * scale, D, BLOCK_D, INTERPRET)
    _store_rows(DV, out, store, dv, D, BLOCK_D, INTERPRET)


# --------------------------------------------------------------------------------------------------------- launchers
def _config(kind: str, rows, d: int, dtype: torch.dtype, heavy: bool, config=None) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) of the "fwd", "dq" or "dkdv" kernel; BLOCK_M counts stacked rows
    (queries x group heads). `rows` (S_q * G, maybe symbolic) sizes the forward's row tile for decode; `heavy` (a
    mask or softcap: a mask tile and its addresses, or tanh values, live beside the scores) halves BLOCK_N.
    Plain (no mask, no softcap) D <= 128 shapes are from a sweep on the H200 (benchmarks/sweep_attention.py,
    BENCHMARKS.md). The others are untimed, after FlashAttention-2 / the Triton tutorial (forward 128 x 64, 8 warps
    = two wgmma warpgroups, 3 stages; the dK/dV kernel's two [BLOCK_N, D] fp32 accumulators ask for BLOCK_M 32),
    each checked to compile for sm_90 without register spills (ptxas of triton 3.9; D = 64/80/128/256 with and
    without masks, softcap, window, positions and sinks; except D = 256 heavy forward, 32 bytes). fp32 (FMA dots,
    a correctness path) gets small tiles (a few spills with every feature on).
    Interpreter: 16-32 (each program and tile step costs ~1 ms, whatever its size)."""
    if config is not None:
        block_m, block_n, num_warps, num_stages = config
    elif interpreting():
        block_m, block_n, num_warps, num_stages = 32, 16, 4, 1
        if kind == "fwd":
            block_m = max(16, min(32, triton.next_power_of_2(max(size_hint(rows), 1))))
    else:
        block_d = triton.next_power_of_2(d)
        if dtype == torch.float32:
            block_m, block_n, num_warps, num_stages = {"fwd": (16, 32, 4, 1), "dq": (16, 16, 8, 1),
                                                       "dkdv": (16, 16, 4, 1)}[kind]
        elif kind == "fwd":
            if size_hint(rows) <= 64:  # decode: one row tile holds the group's heads; long key tiles, mma v2
                block_m, block_n, num_warps, num_stages = (max(16, triton.next_power_of_2(max(size_hint(rows), 1))),
                                                           128 if block_d <= 128 else 64, 4, 3)
            elif block_d <= 128:  # swept on the H200 (B4 S4096 causal GQA 4): 128 x 128 x 8 x 3 440 TFLOP/s
                block_m, block_n, num_warps, num_stages = (128, 32, 8, 3) if heavy else (128, 128, 8, 3)
            else:  # D = 256 (Gemma): heavy spills 32 bytes, the least of the shapes tried
                block_m, block_n, num_warps, num_stages = (64 if heavy else 128, 32, 8, 2)
        elif block_d <= 128 and not heavy:  # swept on the H200, one config for both kernels: 64 x 128 x 8 x 2
            block_m, block_n, num_warps, num_stages = 64, 128, 8, 2  # 6.7 ms, against 9.3 for the shapes below
        elif kind == "dq":
            if block_d <= 128:
                block_m, block_n, num_warps, num_stages = (128, 32, 8, 2)
            else:
                block_m, block_n, num_warps, num_stages = (32, 32, 8, 1)
        else:
            block_m, block_n, num_warps, num_stages = {64: (32, 128, 8, 2), 128: (32, 64, 8, 2)}.get(
                max(block_d, 64), (32, 32, 8, 1))
    for block in (block_m, block_n):
        if block < 16 or block & (block - 1):
            raise ValueError(f"mojo attention: blocks must be powers of 2 >= 16 (tl.dot), got {config}")
    return block_m, block_n, num_warps, num_stages


def _unit_last(t: torch.Tensor) -> torch.Tensor:
    """The kernels take every stride but the last, which must be 1 (copied only in the rare other case)."""
    return t if t.stride(-1) == 1 else t.contiguous()


def _check(q, k, v):
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"mojo attention: q/k/v must be [B, H, S, D], got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    hq, d = q.shape[1], q.shape[3]
    hkv = k.shape[1]
    if v.shape[1] != hkv or k.shape[3] != d or v.shape[3] != d or hkv == 0 or hq % hkv:
        raise ValueError(f"mojo attention: need Hq % Hkv == 0 and one head dim (D == Dv), got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"mojo attention: q/k/v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")


def _key_ranges(keys: torch.Tensor) -> torch.Tensor:
    """[B, 3] int32 (first allowed key, last allowed key + 1, whether a key between them is masked) of a key mask's
    rows [B, S_kv]; a row with no allowed key: (S_kv, 0, 0). Device ops, no host sync."""
    count = keys.sum(-1, dtype=torch.int32)
    first = (keys.cumsum(-1, dtype=torch.int32) == 0).sum(-1, dtype=torch.int32)  # keys before the first allowed
    end = keys.shape[-1] - (keys.flip(-1).cumsum(-1, dtype=torch.int32) == 0).sum(-1, dtype=torch.int32)
    holes = count < (end - first).clamp_min(0)
    return torch.stack([first, end, holes.to(torch.int32)], -1).contiguous()


def _extras(q, k, q_pos, mask, sinks):
    """(mask view [B, Hq, S_q, S_kv] or a dummy, MASK_KIND, key ranges or None, q_pos, sinks): broadcast dims get
    stride 0."""
    batch, hq, s_q, _ = q.shape
    s_kv = k.shape[2]
    kind, ranges = MASK_NONE, None
    if mask is not None:
        kind = MASK_BOOL if mask.dtype == torch.bool else MASK_ADD
        if kind == MASK_BOOL and all(isinstance(n, int) and n == 1 for n in mask.shape[-3:-1]):
            kind = MASK_KEYS  # [B, 1, 1, S_kv] (key padding) or narrower: one row of keys per batch
            # (the row count spelled out: reshape(-1, 0) is ambiguous for an empty key sequence)
            rows = mask.reshape(math.prod(mask.shape[:-1]), mask.shape[-1])
            ranges = _key_ranges(rows.expand(-1, s_kv))
        if kind != MASK_ADD:
            mask = as_bytes(mask)  # a byte per element either way; loads as an integer everywhere
        mask = mask.expand(batch, hq, s_q, s_kv)
    q_pos = q_pos.contiguous() if q_pos is not None else None
    sinks = sinks.contiguous() if sinks is not None else None
    return mask, kind, ranges, q_pos, sinks


def _launches(kind: int) -> tuple[int, ...]:
    """The kernels' MASK_KIND per launch: a key mask takes two, the batch rows without holes in their key range
    and those with (each launch's programs skip the other's rows; one kernel holding both loops would need the
    shared memory of both)."""
    return (MASK_KEYS, MASK_KEY_HOLES) if kind == MASK_KEYS else (kind,)


def _ranges_arg(ranges, q):
    """The key ranges and their batch stride (0 for one row broadcast over the batch), or a dummy."""
    if ranges is None:
        return q, 0
    ranges = ranges.expand(q.shape[0], 3)
    return ranges, ranges.stride(0)


def _grid(q, tiles: tuple):
    """The launch grid for (row or key blocks, kv heads, batch) tiles: that grid, or on a persistent device one
    program per AI core, each looping over the tiles (the kernels' PERSISTENT)."""
    caps = device_caps(q.device)
    return (caps.programs(tiles[0] * tiles[1] * tiles[2], matrix=True),) if caps.persistent else tiles


def _flags(q, causal, window, softcap, q_pos, kind, sinks, hq, hkv, d):
    return dict(HQ=hq, HKV=hkv, D=d, CAUSAL=bool(causal), HAS_WINDOW=window > 0, HAS_SOFTCAP=softcap > 0.0,
                HAS_QPOS=q_pos is not None, MASK_KIND=kind, BLOCK_D=max(16, triton.next_power_of_2(d)),
                INTERPRET=interpreting(), PERSISTENT=device_caps(q.device).persistent,
                DOT_PRECISION=device_caps(q.device).dot_precision(exact=q.dtype == torch.float32 or interpreting()))


def attention_fwd(q, k, v, scale, causal=False, window=0, softcap=0.0, q_pos=None, mask=None, sinks=None,
                  config=None):
    """Flash attention forward (see the module docstring for the semantics). Returns (out [B, Hq, S_q, D]
    contiguous in q's dtype, lse [B, Hq, S_q] fp32: natural log of the softmax denominator, -inf for empty rows).
    `config` = (BLOCK_M, BLOCK_N, num_warps, num_stages) overrides `_config`."""
    _check(q, k, v)
    q, k, v = _unit_last(q), _unit_last(k), _unit_last(v)
    batch, hq, s_q, d = q.shape
    hkv, s_kv = k.shape[1], k.shape[2]
    mask, kind, ranges, q_pos, sinks = _extras(q, k, q_pos, mask, sinks)
    out = torch.empty((batch, hq, s_q, d), dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, hq, s_q), dtype=torch.float32, device=q.device)
    group = hq // hkv
    heavy = kind in (MASK_BOOL, MASK_ADD) or softcap > 0.0
    block_m, block_n, num_warps, num_stages = _config("fwd", s_q * group, d, q.dtype, heavy, config)
    grid = _grid(q, (triton.cdiv(s_q * group, block_m), hkv, batch))  # 0 programs for empty inputs: no launch
    m_strides = mask.stride() if mask is not None else (0, 0, 0, 0)
    ranges, srb = _ranges_arg(ranges, q)
    for launch_kind in _launches(kind):
        wrap_triton(_fwd_kernel)[grid](
            q, k, v, out, lse, q_pos if q_pos is not None else q, mask if mask is not None else q, ranges,
            sinks if sinks is not None else q, scale, softcap, window, s_q, s_kv,
            *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *m_strides, srb,
            **_flags(q, causal, window, softcap, q_pos, launch_kind, sinks, hq, hkv, d), HAS_SINKS=sinks is not None,
            BLOCK_M=block_m, BLOCK_N=block_n, batch=batch, num_warps=num_warps, num_stages=num_stages)
    return out, lse


def attention_bwd(grad_out, q, k, v, out, lse, scale, causal=False, window=0, softcap=0.0, q_pos=None, mask=None,
                  sinks=None, config=None):
    """Gradients of attention_fwd: (dq, dk, dv, dsinks) in q/k/v's dtypes (dsinks in the sinks' dtype, None without
    sinks); the mask gets none. Deterministic. `config`: one (BLOCK_M, BLOCK_N, num_warps, num_stages) for both
    kernels, or a pair (dQ kernel's, dK/dV kernel's)."""
    _check(q, k, v)
    q, k, v, out = (_unit_last(t) for t in (q, k, v, out))
    grad_out = _unit_last(grad_out.to(q.dtype))  # dP = dO V^T: one dtype for both dot operands
    batch, hq, s_q, d = q.shape
    hkv, s_kv = k.shape[1], k.shape[2]
    group = hq // hkv
    mask, kind, ranges, q_pos, sinks = _extras(q, k, q_pos, mask, sinks)
    lse = lse.contiguous()
    dq = torch.empty((batch, hq, s_q, d), dtype=q.dtype, device=q.device)
    dk = torch.empty((batch, hkv, s_kv, d), dtype=k.dtype, device=k.device)
    dv = torch.empty((batch, hkv, s_kv, d), dtype=v.dtype, device=v.device)
    stat = dict(dtype=torch.float32, device=q.device)
    delta = torch.empty((batch, hq, s_q), **stat)
    r_norm = torch.empty((batch, hq, s_q), **stat) if kind == MASK_ADD else delta
    p_sink = torch.empty((batch, hq, s_q), **stat) if sinks is not None else delta
    if config is not None and not isinstance(config[0], int):
        dq_config, kv_config = config
    else:
        dq_config = kv_config = config
    m_strides = mask.stride() if mask is not None else (0, 0, 0, 0)
    flags = _flags(q, causal, window, softcap, q_pos, kind, sinks, hq, hkv, d)
    q_pos_arg = q_pos if q_pos is not None else q
    mask_arg = mask if mask is not None else q
    ranges, srb = _ranges_arg(ranges, q)

    # dQ first: it writes delta (and the row normalisers) that the dK/dV kernel reads.
    heavy = kind in (MASK_BOOL, MASK_ADD) or softcap > 0.0
    block_m, block_n, num_warps, num_stages = _config("dq", s_q * group, d, q.dtype, heavy, dq_config)
    for launch_kind in _launches(kind):
        wrap_triton(_bwd_dq_kernel)[_grid(q, (triton.cdiv(s_q * group, block_m), hkv, batch))](
            q, k, v, out, grad_out, lse, delta, r_norm, p_sink, dq, q_pos_arg, mask_arg, ranges,
            sinks if sinks is not None else q, scale, softcap, window, s_q, s_kv, *q.stride()[:3], *k.stride()[:3],
            *v.stride()[:3], *out.stride()[:3], *grad_out.stride()[:3], *m_strides, srb,
            **dict(flags, MASK_KIND=launch_kind), HAS_SINKS=sinks is not None, BLOCK_M=block_m, BLOCK_N=block_n,
            batch=batch, num_warps=num_warps, num_stages=num_stages)

    block_m, block_n, num_warps, num_stages = _config("dkdv", s_q * group, d, q.dtype, heavy, kv_config)
    for launch_kind in _launches(kind):
        wrap_triton(_bwd_dkdv_kernel)[_grid(q, (triton.cdiv(s_kv, block_n), hkv, batch))](
            q, k, v, grad_out, lse, delta, r_norm, dk, dv, q_pos_arg, mask_arg, ranges, scale, softcap, window, s_q,
            s_kv, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *grad_out.stride()[:3], *m_strides, srb,
            **dict(flags, MASK_KIND=launch_kind), BLOCK_M=block_m, BLOCK_N=block_n, batch=batch, num_warps=num_warps,
            num_stages=num_stages)

    dsinks = (-p_sink.sum(dim=(0, 2))).to(sinks.dtype) if sinks is not None else None
    return dq, dk, dv, dsinks
