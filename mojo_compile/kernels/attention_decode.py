"""Triton split-KV decode attention (Flash-Decoding) for short query lengths, with a log-sum-exp merge. Inference only.

Shapes: q [B, Hq, Sq, D] (Sq small: 1..16, a decode step or a few speculative tokens), k / v [B, Hkv, Skv, D], a
static KV cache whose tail beyond the current positions may be unfilled garbage. Any strides with the last one 1.
GQA: q head h reads kv head h // (Hq // Hkv).

Stage 1 (_split_kernel), grid (num_splits, Hkv * row_chunks, B): a program takes ALL q heads of one kv head -- the
rows of its tile are (group head, query) pairs, G * Sq of them, padded to >= 16 for tl.dot -- and one split of the
KV range, so each K/V block is read from HBM once per split and shared by the whole GQA group. (A group with more
than MAX_BLOCK_M rows, i.e. a large Sq x group, is cut into row chunks that re-read K/V: registers, not bandwidth,
bound there.) The KV range is data-dependent: from the positions of the tile's rows, loaded in the kernel, it is
[min(pos) - window + 1, max(pos)] (causal; only the window's left bound without causal, else all Skv keys). That
range is cut into num_splits equal chunks (multiples of BLOCK_N), so the splits share the keys actually attended,
not the cache length, and the unfilled tail of the cache is never read. Without positions (HF's StaticCache decode
step: a bool mask over the whole cache, True on the filled slots, causal off) the range is all Skv keys; with a bool
mask (MASK_KIND 1) the split reads each block's mask bytes first, and K and V of a block that no row of its tile may
attend are masked off in their loads (not read: zeros; the dots and the softmax update still run), so the unfilled
tail costs its mask bytes only. Exact: such a block has every score -inf, p = 0, and leaves m, den and acc bit for
bit as they are. Masked loads rather than a run-time branch around the block keep the K/V loads software-pipelined
(cp.async); with the branch Triton loaded them synchronously. Each split runs the online softmax on exp2 (scale *
log2(e) folded into one multiply of the fp32 scores) and writes its normalised partial output o_s, its running max
m_s and its denominator l_s (lse_s = m_s + log l_s), fp32, to workspaces [B, Hq, Sq, num_splits, D] and 2 x [B, Hq,
Sq, num_splits].

Stage 2 (_merge_kernel), one program per BLOCK_R rows (b, h, i): the LSE trick, out = sum_s w_s o_s / sum_s w_s
with w_s = l_s exp(m_s - max m), plus the attention sink's exp(sink) in the denominator; out in q's dtype, lse fp32
(natural log, sink included). m and l are kept apart rather than folded into one lse per split: with an additive
mask of finfo.min (HF's way of masking) a fully masked row has m = finfo.min, and finfo.min + log(l_s) rounds to
finfo.min, which would lose the splits' key counts (eager softmax makes such a row uniform over its keys; so does
this kernel, with any split count). With num_splits == 1 stage 1 finishes the rows itself (DIRECT): no workspace,
no second launch.

Masking: key j (position j) is allowed for row i iff j <= q_pos[i] (causal), j > q_pos[i] - window (window > 0),
and the optional mask allows it (bool: True = attend; float: added to the score). A split, or a whole row, with no
allowed key contributes nothing: lse -inf, out 0 -- every exp2 is taken against a max guarded from -inf, so no NaN.
With an additive mask the scores stay in natural units and exp2 gets (s - m) * log2(e) (NATURAL): finfo.min *
log2(e) would overflow to -inf and turn eager's uniform row into an empty one.

Numerics: scores are fp32 dot products of q and k in their own dtype (bf16 tensor cores on a GPU; fp32 inputs use
IEEE fp32 dots, not TF32). Softcap, mask and sink are applied in fp32. The probabilities are rounded to v's dtype
for the PV dot, as every flash kernel does (the denominator sums them unrounded, in fp32). Under TRITON_INTERPRET=1,
whose bf16 arithmetic and bf16 tl.dot are wrong, K/V/q are upcast to fp32 after loading and the rounding of the
probabilities is reproduced with _round, so the interpreter computes what the GPU does. Scalars are cast to fp32 in
the kernel (torch.compile may hand Python floats over as fp64).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import as_bytes, device_caps, exp_units, interpreting, round_to, size_hint, tanhf, wrap_triton, writes

__all__ = ["attention_decode"]

_LOG2E = tl.constexpr(1.4426950408889634)
_LN2 = tl.constexpr(0.6931471805599453)
MAX_BLOCK_M = 128  # rows (group heads x queries) of one program; more are cut into row chunks
MIN_KEYS_PER_SPLIT = 256  # a split shorter than this costs more in merge traffic and launch than it hides
MAX_SPLITS = 128
WAVES = 2  # target programs = WAVES x SMs


# ----------------------------------------------------------------------------------------------------------- helpers
@triton.jit
def _finish(o, m, den, SINKS, h, row_ok, HAS_SINK: tl.constexpr, NATURAL: tl.constexpr):
    """The row's final (o, lse): o normalised by den, the softmax denominator relative to exp(m) (m, the max, in
    the scores' units), plus the sink (a logit per q head, natural log, in the denominator only). lse in natural
    log. A row with nothing allowed (den 0) and no sink: (0, -inf)."""
    if HAS_SINK:
        sink = tl.load(SINKS + h, mask=row_ok, other=0.0).to(tl.float32)
        if not NATURAL:
            sink = sink * _LOG2E
        top = tl.maximum(tl.where(den > 0, m, float("-inf")), sink)
        top = tl.where(top == float("-inf"), 0.0, top)
        w = den * exp_units(m - top, NATURAL)  # 0 when den is 0 (then m may be -inf: exp 0, or finite)
        w = tl.where(den > 0, w, 0.0)
        o = o * tl.where(den > 0, w / (w + exp_units(sink - top, NATURAL)), 0.0)[:, None]
        m = top
        den = w + exp_units(sink - top, NATURAL)
    has = den > 0
    lse = tl.where(has, m + tl.log2(tl.where(has, den, 1.0)) * (_LN2 if NATURAL else 1.0), float("-inf"))
    if not NATURAL:
        lse = lse * _LN2
    return o, lse


@triton.jit
def _key_ok(n, n_ok, row_ok, pos, window, CAUSAL: tl.constexpr, WINDOWED: tl.constexpr):
    """[BLOCK_M, BLOCK_N]: key n allowed for the row by the ranges alone (the row and key in bounds, causal, window)."""
    ok = row_ok[:, None] & n_ok[None, :]
    if CAUSAL:
        ok = ok & (n[None, :] <= pos[:, None])
    if WINDOWED:
        ok = ok & (n[None, :] > pos[:, None] - window)
    return ok


# ----------------------------------------------------------------------------------------------------------- stage 1
@writes("OUT", "LSE", DEN=lambda a: not a["DIRECT"])
@triton.jit
def _split_kernel(Q, K, V, QPOS, MASK, SINKS, OUT, LSE, DEN,
                  Skv, num_splits, qk_scale, cap_in, cap_out, window,
                  sqb, sqh, sqs, skb, skh, skn, svb, svh, svn, smb, smh, sms, smn,
                  HQ: tl.constexpr, SQ: tl.constexpr, GROUP: tl.constexpr, D: tl.constexpr,
                  ROW_CHUNKS: tl.constexpr, CAUSAL: tl.constexpr, WINDOWED: tl.constexpr, SOFTCAP: tl.constexpr,
                  HAS_QPOS: tl.constexpr, MASK_KIND: tl.constexpr, HAS_SINK: tl.constexpr, DIRECT: tl.constexpr,
                  DOT_PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                  INTERPRET: tl.constexpr, batch, PERSISTENT: tl.constexpr):
    """OUT / LSE / DEN: the fp32 workspaces [B, Hq, Sq, num_splits, D] for o, 2 x [B, Hq, Sq, num_splits] for the
    max (in the scores' units) and the denominator; or, DIRECT, the outputs [B, Hq, Sq, D] (q's dtype) and
    [B, Hq, Sq] (lse, fp32, natural log), DEN unused. MASK_KIND: 0 none, 1 bool (as uint8), 2 additive (scores in
    natural units, NATURAL). With SOFTCAP, qk_scale is unused: the score is cap_out * tanh(cap_in * q.k)."""
    if PERSISTENT:  # one program per core, each taking every num_programs-th tile
        grid0, grid1 = num_splits, (HQ // GROUP) * ROW_CHUNKS
        for task in range(tl.program_id(0), grid0 * grid1 * batch, tl.num_programs(0)):
            _split_tile(task % grid0, task // grid0 % grid1, task // (grid0 * grid1), grid0, Q, K, V, QPOS, MASK, SINKS,
                        OUT, LSE, DEN, Skv, num_splits, qk_scale, cap_in, cap_out, window, sqb, sqh, sqs, skb, skh, skn,
                        svb, svh, svn, smb, smh, sms, smn, HQ, SQ, GROUP, D, ROW_CHUNKS, CAUSAL, WINDOWED, SOFTCAP,
                        HAS_QPOS, MASK_KIND, HAS_SINK, DIRECT, DOT_PRECISION, BLOCK_M, BLOCK_N, BLOCK_D, INTERPRET)
    else:
        _split_tile(tl.program_id(0), tl.program_id(1), tl.program_id(2), tl.num_programs(0), Q, K, V, QPOS, MASK,
                    SINKS, OUT, LSE, DEN, Skv, num_splits, qk_scale, cap_in, cap_out, window, sqb, sqh, sqs, skb, skh,
                    skn, svb, svh, svn, smb, smh, sms, smn, HQ, SQ, GROUP, D, ROW_CHUNKS, CAUSAL, WINDOWED, SOFTCAP,
                    HAS_QPOS, MASK_KIND, HAS_SINK, DIRECT, DOT_PRECISION, BLOCK_M, BLOCK_N, BLOCK_D, INTERPRET)


@triton.jit
def _split_tile(pid0, pid1, pid2, grid0, Q, K, V, QPOS, MASK, SINKS, OUT, LSE, DEN, Skv, num_splits, qk_scale, cap_in,
                cap_out, window, sqb, sqh, sqs, skb, skh, skn, svb, svh, svn, smb, smh, sms, smn, HQ: tl.constexpr,
                SQ: tl.constexpr, GROUP: tl.constexpr, D: tl.constexpr, ROW_CHUNKS: tl.constexpr, CAUSAL: tl.constexpr,
                WINDOWED: tl.constexpr, SOFTCAP: tl.constexpr, HAS_QPOS: tl.constexpr, MASK_KIND: tl.constexpr,
                HAS_SINK: tl.constexpr, DIRECT: tl.constexpr, DOT_PRECISION: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, INTERPRET: tl.constexpr):
    NATURAL: tl.constexpr = MASK_KIND == 2
    UNIT: tl.constexpr = 1.0 if NATURAL else _LOG2E
    qk_scale = tl.cast(qk_scale, tl.float32) * UNIT
    cap_in = tl.cast(cap_in, tl.float32)  # scale / softcap
    cap_out = tl.cast(cap_out, tl.float32) * UNIT  # softcap
    split = pid0
    kvh = pid1 // ROW_CHUNKS
    b = tl.cast(pid2, tl.int64)  # (an int in the interpreter's persistent loop)

    # The tile's rows: (group head g, query i), g-major, so q head h = kvh * GROUP + g.
    rows = (pid1 % ROW_CHUNKS) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < GROUP * SQ
    i = rows % SQ
    h = (kvh * GROUP + rows // SQ).to(tl.int64)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    q = tl.load(Q + b * sqb + h[:, None] * sqh + i[:, None].to(tl.int64) * sqs + d[None, :],
                mask=row_ok[:, None] & d_ok[None, :], other=0.0)
    if INTERPRET:
        q = q.to(tl.float32)

    # Positions, and from them this tile's KV range [lo, hi) (data-dependent: the unfilled cache tail is skipped).
    if HAS_QPOS:
        pos = tl.load(QPOS + i, mask=row_ok, other=0).to(tl.int32)
    else:
        pos = Skv - SQ + i  # bottom-right aligned
    lo = 0
    hi = Skv
    if CAUSAL:
        hi = tl.minimum(tl.max(tl.where(row_ok, pos, -1), axis=0) + 1, Skv)
    if WINDOWED:
        lo = tl.maximum(tl.min(tl.where(row_ok, pos, Skv), axis=0) - window + 1, 0)
    # This split's share: equal chunks of whole blocks, so only the last block of a split is partial.
    chunk = tl.cdiv(tl.cdiv(tl.maximum(hi - lo, 0), num_splits), BLOCK_N) * BLOCK_N
    s_lo = lo + split * chunk
    s_hi = tl.minimum(hi, s_lo + chunk)

    k_base = K + b * skb + kvh.to(tl.int64) * skh
    v_base = V + b * svb + kvh.to(tl.int64) * svh
    m_base = MASK + b * smb + h * smh + i.to(tl.int64) * sms  # [BLOCK_M] row bases into the mask
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running max, in the scores' units
    den = tl.zeros([BLOCK_M], dtype=tl.float32)  # running denominator (fp32, unrounded probabilities)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for start in range(s_lo, s_hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_ok = n < s_hi
        n64 = n.to(tl.int64)
        kv_ok = n_ok[:, None] & d_ok[None, :]
        if MASK_KIND == 1:  # the bool mask before K and V: a block that no row of the tile may attend is not read
            ok = _key_ok(n, n_ok, row_ok, pos, window, CAUSAL, WINDOWED)
            ok = ok & (tl.load(m_base[:, None] + n64[None, :] * smn, mask=ok, other=0) != 0)
            kv_ok = tl.where(tl.max(tl.max(ok.to(tl.int32), axis=1), axis=0) > 0, kv_ok, False)
        k = tl.load(k_base + n64[:, None] * skn + d[None, :], mask=kv_ok, other=0.0)
        if INTERPRET:
            k = k.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
        if SOFTCAP:
            s = cap_out * tanhf(s * cap_in, INTERPRET)
        else:
            s = s * qk_scale
        if MASK_KIND != 1:
            ok = _key_ok(n, n_ok, row_ok, pos, window, CAUSAL, WINDOWED)
            if MASK_KIND == 2:
                s += tl.load(m_base[:, None] + n64[None, :] * smn, mask=ok, other=0.0).to(tl.float32)
        s = tl.where(ok, s, float("-inf"))

        # Online softmax; a row with nothing allowed so far keeps m = -inf, so exponents use a guarded max.
        m_new = tl.maximum(m, tl.max(s, axis=1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = exp_units(m - m_use, NATURAL)
        p = exp_units(s - m_use[:, None], NATURAL)
        den = den * alpha + tl.sum(p, axis=1)
        v = tl.load(v_base + n64[:, None] * svn + d[None, :], mask=kv_ok, other=0.0)
        if INTERPRET:  # the GPU's rounding of p to v's dtype, done by hand (the interpreter's bf16 cast truncates)
            p = round_to(p, V.dtype.element_ty, INTERPRET).to(tl.float32)
            v = v.to(tl.float32)
        else:
            p = p.to(V.dtype.element_ty)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=DOT_PRECISION)
        m = m_new

    # den >= 1 once any key was allowed (the max contributes exp(0)); else acc is 0 and so is o.
    o = acc / tl.where(den > 0, den, 1.0)[:, None]
    row = (b * HQ + h) * SQ + i  # (b, h, i) flattened
    if DIRECT:
        o, lse = _finish(o, m, den, SINKS, h, row_ok, HAS_SINK, NATURAL)
        tl.store(OUT + row[:, None] * D + d[None, :], round_to(o, OUT.dtype.element_ty, INTERPRET),
                 mask=row_ok[:, None] & d_ok[None, :])
        tl.store(LSE + row, lse, mask=row_ok)
    else:
        slot = row * num_splits + split
        tl.store(OUT + slot[:, None] * D + d[None, :], o, mask=row_ok[:, None] & d_ok[None, :])
        tl.store(LSE + slot, m, mask=row_ok)
        tl.store(DEN + slot, den, mask=row_ok)


# ----------------------------------------------------------------------------------------------------------- stage 2
@writes("OUT", "LSE")
@triton.jit
def _merge_kernel(O_WS, M_WS, DEN_WS, SINKS, OUT, LSE, R, num_splits,
                  HQ: tl.constexpr, SQ: tl.constexpr, D: tl.constexpr, HAS_SINK: tl.constexpr, NATURAL: tl.constexpr,
                  BLOCK_R: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, INTERPRET: tl.constexpr,
                  PERSISTENT: tl.constexpr):
    """Merges the splits of BLOCK_R rows (flattened (b, h, i)) as 3-D tiles [BLOCK_R, BLOCK_S, BLOCK_D]: a block of
    rows a program, or (PERSISTENT: one program per core) every num_programs-th block."""
    if PERSISTENT:
        for block in range(tl.program_id(0), tl.cdiv(R, BLOCK_R), tl.num_programs(0)):
            _merge_rows(block, O_WS, M_WS, DEN_WS, SINKS, OUT, LSE, R, num_splits, HQ, SQ, D, HAS_SINK, NATURAL,
                        BLOCK_R, BLOCK_S, BLOCK_D, INTERPRET)
    else:
        _merge_rows(tl.program_id(0), O_WS, M_WS, DEN_WS, SINKS, OUT, LSE, R, num_splits, HQ, SQ, D, HAS_SINK,
                    NATURAL, BLOCK_R, BLOCK_S, BLOCK_D, INTERPRET)


@triton.jit
def _merge_rows(block, O_WS, M_WS, DEN_WS, SINKS, OUT, LSE, R, num_splits,
                HQ: tl.constexpr, SQ: tl.constexpr, D: tl.constexpr, HAS_SINK: tl.constexpr, NATURAL: tl.constexpr,
                BLOCK_R: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, INTERPRET: tl.constexpr):
    rows = tl.cast(block, tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = rows < R
    s = tl.arange(0, BLOCK_S)
    d = tl.arange(0, BLOCK_D)
    rs_ok = row_ok[:, None] & (s < num_splits)[None, :]
    slot = rows[:, None] * num_splits + s[None, :]  # [BLOCK_R, BLOCK_S]
    den_s = tl.load(DEN_WS + slot, mask=rs_ok, other=0.0)
    m_s = tl.where(den_s > 0, tl.load(M_WS + slot, mask=rs_ok, other=0.0), float("-inf"))  # empty split: -inf
    top = tl.max(m_s, axis=1)
    top = tl.where(top == float("-inf"), 0.0, top)  # every split empty: all weights 0, no NaN
    w = den_s * exp_units(m_s - top[:, None], NATURAL)  # split s's denominator relative to exp(top)
    den = tl.sum(w, axis=1)
    o_s = tl.load(O_WS + slot[:, :, None] * D + d[None, None, :], mask=rs_ok[:, :, None] & (d < D)[None, None, :],
                  other=0.0)
    o = tl.sum(w[:, :, None] * o_s, axis=1) / tl.where(den > 0, den, 1.0)[:, None]
    o, lse = _finish(o, top, den, SINKS, (rows // SQ) % HQ, row_ok, HAS_SINK, NATURAL)
    tl.store(OUT + rows[:, None] * D + d[None, :], round_to(o, OUT.dtype.element_ty, INTERPRET),
             mask=row_ok[:, None] & (d < D)[None, :])
    tl.store(LSE + rows, lse, mask=row_ok)


# --------------------------------------------------------------------------------------------------------- launchers
def _sms(device: torch.device) -> int:
    """Cores to fill (SMs; Ascend's AI cores: the kernel has dots); 4 in the interpreter (devices.py)."""
    return device_caps(device).matrix_cores


def default_num_splits(programs: int, skv: int, sms: int) -> int:
    """Splits per (batch, kv head, row chunk): enough programs for WAVES waves of the SMs, but no split of the
    cache shorter than MIN_KEYS_PER_SPLIT keys. `programs` (B x Hkv x row chunks) and `skv` (the cache length) are
    static hints; the count is a Python int, baked into the launch."""
    want = triton.cdiv(WAVES * sms, max(programs, 1))
    return max(1, min(want, skv // MIN_KEYS_PER_SPLIT, MAX_SPLITS))


def _config(d: int, dtype: torch.dtype, block_m: int, config=None) -> tuple[int, int, int]:
    """(BLOCK_N, num_warps, num_stages) of stage 1. K and V tiles of ~16 KB each (BLOCK_N x D x 2 B), two stages:
    timed on the H200 (B64, ctx 4096, GQA 4, D 128, bf16; scratch sweep of BLOCK_N 32-128 x 4/8 warps x 2-5
    stages x 1-6 splits, the best re-timed three times): 64 x 4 warps x 2 stages 237.3 us (SDPA's cuDNN kernel
    237.2), the next 238.9-240.2; the earlier 3 stages at BLOCK_N 64 were an outlier at 268.9 (3 programs per SM
    by shared memory, 1.3 waves: ncu showed the SMs busy 72% of the time). fp32 halves the tiles. BLOCK_M 128
    spills with 4 warps, not with 8. `config` overrides it."""
    if config is not None:
        return tuple(config)
    block_d = triton.next_power_of_2(d)
    block_n = max(16, min(128, 8192 // block_d)) if dtype != torch.float32 else max(16, min(64, 4096 // block_d))
    return block_n, 4 if block_m <= 64 else 8, 2


def _merge_config(num_splits: int, d: int, rows_per_batch: int) -> tuple[int, int, int, int]:
    """(BLOCK_R, BLOCK_S, BLOCK_D, num_warps) of stage 2: ~4K-element tiles on a GPU, ~64K in the interpreter,
    where each program costs ~1 ms but wide numpy ops are cheap."""
    block_s, block_d = triton.next_power_of_2(num_splits), triton.next_power_of_2(d)
    budget = 65536 if interpreting() else 4096
    block_r = max(1, min(budget // (block_s * block_d), triton.next_power_of_2(rows_per_batch)))
    return block_r, block_s, block_d, 4


def _last_contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 or t.shape[-1] <= 1 else t.contiguous()


def attention_decode(q, k, v, scale, causal=True, window=0, softcap=0.0, q_pos=None, mask=None, sinks=None,
                     num_splits=None, config=None):
    """Split-KV decode attention. q [B, Hq, Sq, D], k / v [B, Hkv, Skv, D] (a static cache; keys past the
    positions are never read when causal). Returns (out [B, Hq, Sq, D] in q's dtype, contiguous; lse [B, Hq, Sq]
    fp32, natural log, the sink included; -inf for a row with nothing allowed, whose out is 0).

    q_pos: int tensor [Sq], the positions of the queries (default: bottom-right, Skv - Sq + i); key j has position
    j. causal: key j allowed iff j <= q_pos[i]; window > 0: also j > q_pos[i] - window. softcap > 0:
    softcap * tanh(score / softcap) on the scaled score. mask: bool (True = attend) or additive float, broadcastable
    to [B, Hq, Sq, Skv] (an additive finfo.min acts as in eager softmax: a row masked everywhere by it is uniform
    over its causally allowed keys, not empty). sinks: [Hq] logits (natural log, neither scaled nor capped) in the
    softmax denominator only. num_splits: KV splits per (batch, kv head); default from occupancy
    (default_num_splits). config: (BLOCK_N, num_warps, num_stages) of the split kernel.

    Hq, Hkv, Sq and D are specialised (Python ints); B and Skv may be symbolic -- the default split count then
    comes from their hints without a guard."""
    if q.dim() != 4 or k.dim() != 4 or v.shape != k.shape:
        raise ValueError(f"mojo attention_decode: expected q [B, Hq, Sq, D] and k, v [B, Hkv, Skv, D], got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"mojo attention_decode: q, k, v dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}")
    batch, skv = q.shape[0], k.shape[2]
    hq, sq, d, hkv = int(q.shape[1]), int(q.shape[2]), int(q.shape[3]), int(k.shape[1])
    if k.shape[3] != d or hkv == 0 or hq % hkv:
        raise ValueError(f"mojo attention_decode: q {tuple(q.shape)} and k {tuple(k.shape)}: head dims must match "
                         f"and Hq must be a multiple of Hkv")
    q, k, v = _last_contiguous(q), _last_contiguous(k), _last_contiguous(v)
    out = torch.empty((batch, hq, sq, d), dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, hq, sq), dtype=torch.float32, device=q.device)
    if hq == 0 or sq == 0 or d == 0 or size_hint(batch) == 0:
        return out, lse

    group = hq // hkv
    block_m = max(16, min(MAX_BLOCK_M, triton.next_power_of_2(group * sq)))
    row_chunks = triton.cdiv(group * sq, block_m)
    if num_splits is None:
        num_splits = default_num_splits(size_hint(batch) * hkv * row_chunks, size_hint(skv), _sms(q.device))
    num_splits = int(num_splits)
    if num_splits < 1:
        raise ValueError(f"mojo attention_decode: num_splits must be >= 1, got {num_splits}")
    block_n, num_warps, num_stages = _config(d, q.dtype, block_m, config)
    block_d = max(16, triton.next_power_of_2(d))

    mask_kind, mask_arg, mask_strides = 0, q, (0, 0, 0, 0)
    if mask is not None:
        if mask.dim() > 4:
            raise ValueError(f"mojo attention_decode: mask {tuple(mask.shape)} has more than 4 dims")
        mask_kind = 1 if mask.dtype == torch.bool else 2
        mask_arg = (as_bytes(mask) if mask_kind == 1 else mask).expand(batch, hq, sq, skv)  # broadcast: stride 0
        mask_strides = tuple(mask_arg.stride())
    qpos_arg = q_pos.contiguous() if q_pos is not None else q
    if q_pos is not None and (q_pos.dim() != 1 or q_pos.shape[0] != sq or q_pos.is_floating_point()):
        raise ValueError(f"mojo attention_decode: q_pos must be an int tensor [{sq}], got {tuple(q_pos.shape)}")
    sinks_arg = sinks.contiguous() if sinks is not None else q
    softcap, window = float(softcap), int(window)
    direct = num_splits == 1
    if direct:
        o_dst, m_dst, den_dst = out, lse, lse
    else:  # fp32 partials
        o_dst = torch.empty((batch, hq, sq, num_splits, d), dtype=torch.float32, device=q.device)
        m_dst, den_dst = torch.empty((2, batch, hq, sq, num_splits), dtype=torch.float32, device=q.device).unbind(0)

    caps = device_caps(q.device)
    tiles = (num_splits, hkv * row_chunks, batch)
    grid = (caps.programs(num_splits * hkv * row_chunks * batch, matrix=True),) if caps.persistent else tiles
    wrap_triton(_split_kernel)[grid](
        q, k, v, qpos_arg, mask_arg, sinks_arg, o_dst, m_dst, den_dst,
        skv, num_splits, scale, scale / softcap if softcap > 0 else 0.0, softcap, window,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), *mask_strides,
        HQ=hq, SQ=sq, GROUP=group, D=d, ROW_CHUNKS=row_chunks, CAUSAL=bool(causal), WINDOWED=window > 0,
        SOFTCAP=softcap > 0, HAS_QPOS=q_pos is not None, MASK_KIND=mask_kind, HAS_SINK=sinks is not None,
        DIRECT=direct, DOT_PRECISION=caps.dot_precision(exact=q.dtype == torch.float32),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d, INTERPRET=interpreting(), batch=batch,
        PERSISTENT=caps.persistent, num_warps=num_warps, num_stages=num_stages)
    if not direct:
        rows = batch * hq * sq
        block_r, block_s, block_d2, merge_warps = _merge_config(num_splits, d, hq * sq)
        wrap_triton(_merge_kernel)[(caps.programs(triton.cdiv(rows, block_r)),)](
            o_dst, m_dst, den_dst, sinks_arg, out, lse, rows, num_splits,
            HQ=hq, SQ=sq, D=d, HAS_SINK=sinks is not None, NATURAL=mask_kind == 2, BLOCK_R=block_r, BLOCK_S=block_s,
            BLOCK_D=block_d2, INTERPRET=interpreting(), PERSISTENT=caps.persistent, num_warps=merge_warps)
    return out, lse
