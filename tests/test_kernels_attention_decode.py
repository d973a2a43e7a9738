"""The Triton split-KV decode attention (kernels/attention_decode.py) against an independent fp64 reference: plain
torch scores, the structural mask from q_pos / causal / window, softcap, masks, sinks, softmax, PV. On CPU it runs
under TRITON_INTERPRET=1 (see conftest.py).

Every case with a causal mask is a static cache whose keys outside the range the queries can attend (beyond max
q_pos, and before min q_pos - window + 1 with a window) are NaN, as is the additive mask there: the output is
finite and right only if that range is never read. Likewise the bool-mask cases without positions (HF's
StaticCache decode step) poison every key block that the mask rules out for all rows of the kernel's tile."""
import itertools
import math

import pytest
import torch
from conftest import DEVICE, KERNEL_TARGET_OK  # sets TRITON_INTERPRET=1 before the kernels are defined
from hopper import compile_for_hopper

from mojo_compile.kernels.attention_decode import attention_decode, default_num_splits

pytestmark = pytest.mark.skipif(not KERNEL_TARGET_OK, reason="needs CUDA or TRITON_INTERPRET=1")

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
U = {BF16: 2.0 ** -8, FP16: 2.0 ** -11, FP32: 2.0 ** -24}  # unit roundoff
NAN = float("nan")

# Tolerances against fp64 on the same (already rounded) inputs. Componentwise, for every output element:
#   |out - ref| <= u_out |ref| + (u_p + EPS32) * A,   A = sum_j p_j |v_j|  (the softmax-weighted |v|)
# u_out: the final rounding to q's dtype. u_p: the probabilities are rounded to v's dtype for the PV dot (bf16 /
# fp16 tensor cores, as in every flash kernel), a relative error <= u on each p_j, so <= u * A on the sum; 0 for
# fp32. EPS32: the fp32 work -- the score dot (D <= 80 terms, |score| <~ 8: worst case gamma_D * 8 ~ 4e-5 absolute,
# i.e. relative on each p_j), the sums over <= 300 keys (gamma_300 ~ 2e-5), exp2 (ex2.approx on the GPU, 2^-22),
# the split merge -- about 1e-4 in the worst case; 2^-12 leaves 2x and still catches a TF32 dot (~3e-3).
EPS32 = 2.0 ** -12
# lse is fp32 throughout (the denominator sums unrounded probabilities) for every dtype: the same score and sum
# errors, absolute in log units, and an fp32 rounding relative to |lse|.
LSE_ATOL, LSE_RTOL = EPS32, EPS32
# Normwise, the p roundings are independent with mean ~0: ||err|| ~ (u_out + u_p / sqrt 3) ||ref|| ~ 1.6 u; 3 u
# (1.2e-2 for bf16) leaves margin and is the "~1e-2" one expects of bf16 attention. Not a worst-case bound (that is
# the componentwise one above) but a check that errors do not pile up in one direction.
NORM_TOL = {BF16: 3 * U[BF16], FP16: 3 * U[FP16], FP32: EPS32}


# ------------------------------------------------------------------------------------------------------ reference
def reference(q, k, v, scale, causal=True, window=0, softcap=0.0, q_pos=None, mask=None, sinks=None):
    """fp64 attention on clean inputs. Returns (out, lse, A) with A = P |V| (for the tolerance)."""
    batch, hq, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    k64 = k.double().repeat_interleave(hq // hkv, dim=1)
    v64 = v.double().repeat_interleave(hq // hkv, dim=1)
    pos = (torch.arange(sq, device=q.device) + skv - sq) if q_pos is None else q_pos.long()
    j = torch.arange(skv, device=q.device)
    allowed = torch.ones(sq, skv, dtype=torch.bool, device=q.device)
    if causal:
        allowed &= j[None, :] <= pos[:, None]
    if window > 0:
        allowed &= j[None, :] > pos[:, None] - window
    s = q.double() @ k64.transpose(-1, -2) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    allowed = allowed.expand(batch, hq, sq, skv)
    if mask is not None and mask.dtype == torch.bool:
        allowed = allowed & mask
    elif mask is not None:
        s = s + mask.double()
    s = s.masked_fill(~allowed, float("-inf"))
    logits = s if sinks is None else torch.cat([s, sinks.double()[None, :, None, None].expand(batch, hq, sq, 1)], -1)
    # Softmax by hand, normalising by the sum rather than exp(s - lse): with an additive finfo.min mask lse rounds
    # to finfo.min even in fp64, and exp(s - lse) would lose the row's key count.
    top = logits.amax(-1, keepdim=True)
    top = torch.where(torch.isneginf(top), 0.0, top)  # a row with nothing allowed: p = 0 (not NaN)
    e = torch.exp(logits - top)
    den = e.sum(-1, keepdim=True)
    p = e[..., :skv] / torch.where(den > 0, den, 1.0)
    lse = (top + torch.log(den)).squeeze(-1)
    return p @ v64, lse, p @ v64.abs()


def check(out, lse, ref, dtype):
    ref_out, ref_lse, a = ref
    assert out.dtype == dtype and out.shape == ref_out.shape and out.is_contiguous()
    assert lse.dtype == FP32 and lse.shape == ref_lse.shape
    assert torch.isfinite(out).all()
    u_p = U[dtype] if dtype != FP32 else 0.0
    err = (out.double() - ref_out).abs()
    bound = U[dtype] * ref_out.abs() + (u_p + EPS32) * a
    assert (err <= bound).all(), (err - bound).max().item()
    if ref_out.norm() > 0:
        rel = ((out.double() - ref_out).norm() / ref_out.norm()).item()
        assert rel <= NORM_TOL[dtype], rel
    empty = torch.isneginf(ref_lse)
    assert torch.equal(torch.isneginf(lse), empty)  # nothing allowed: lse -inf (and out 0, by the bound above)
    torch.testing.assert_close(lse.double()[~empty], ref_lse[~empty], atol=LSE_ATOL, rtol=LSE_RTOL)


# ---------------------------------------------------------------------------------------------------------- inputs
def make_cache(batch, hkv, skv, d, dtype, layout):
    """k, v [B, Hkv, Skv, D]: contiguous BHSD, or BSHD storage transposed (HF's view of a [B, S, H, D] cache), or
    slices of one [B, Hkv, Skv, 2, D] buffer (row stride 2D, as a fused KV cache)."""
    if layout == "bshd":
        return tuple(torch.randn(batch, skv, hkv, d, device=DEVICE).to(dtype).transpose(1, 2) for _ in range(2))
    if layout == "fused":
        kv = torch.randn(batch, hkv, skv, 2, d, device=DEVICE).to(dtype)
        return kv[..., 0, :], kv[..., 1, :]
    return tuple(torch.randn(batch, hkv, skv, d, device=DEVICE).to(dtype) for _ in range(2))


def make_q(batch, hq, sq, d, dtype, layout):
    if layout == "bshd":  # [B, Sq, Hq, D] storage, as the q projection makes it
        return torch.randn(batch, sq, hq, d, device=DEVICE).to(dtype).transpose(1, 2)
    return torch.randn(batch, hq, sq, d, device=DEVICE).to(dtype)


def poison(t, lo, hi, dim):
    """A copy of t with the entries outside [lo, hi] along dim set to NaN: memory the kernel must not read."""
    t = t.clone()
    idx = torch.arange(t.shape[dim], device=t.device)
    outside = (idx < lo) | (idx > hi)
    shape = [1] * t.dim()
    shape[dim] = -1
    return t.masked_fill(outside.view(shape), NAN)


def run_case(batch, hq, hkv, sq, skv, d, dtype, num_splits, causal=True, window=0, softcap=0.0, qpos="fill",
             mask=None, sinks=False, layout="bhsd", config=None):
    """qpos: None (bottom-right), "fill" (consecutive positions ending inside the cache: a static cache with an
    unfilled tail) or "scatter" (distinct positions in any order)."""
    scale = d ** -0.5
    q = make_q(batch, hq, sq, d, dtype, layout)
    k, v = make_cache(batch, hkv, skv, d, dtype, layout)
    if qpos == "fill":
        end = int(torch.randint(sq - 1, skv - 1, ()).item()) if skv > sq else skv - 1
        q_pos = torch.arange(end - sq + 1, end + 1, device=DEVICE)
    elif qpos == "scatter":
        q_pos = torch.randperm(skv, device=DEVICE)[:sq].int()
    else:
        q_pos = None
    m = None
    if mask == "bool":  # per batch and query, broadcast over heads; at least ~half the keys allowed
        m = torch.rand(batch, 1, sq, skv, device=DEVICE) < 0.7
    elif mask == "add":  # per head and query, broadcast over the batch; some keys -inf
        m = torch.randn(1, hq, sq, skv, device=DEVICE) * 2
        m = m.masked_fill(torch.rand_like(m) < 0.1, float("-inf")).to(dtype)
    sink = torch.randn(hq, device=DEVICE) * 2 if sinks else None
    ref = reference(q, k, v, scale, causal, window, softcap, q_pos, m, sink)

    kk, vv, mm = k, v, m
    if causal:  # poison what no query may attend: the tail past max(q_pos), the head before the window
        pos = q_pos.long() if q_pos is not None else torch.arange(skv - sq, skv, device=DEVICE)
        lo = max(int(pos.min()) - window + 1, 0) if window > 0 else 0
        hi = int(pos.max())
        kk, vv = poison(k, lo, hi, 2), poison(v, lo, hi, 2)
        if mask == "add":
            mm = poison(m, lo, hi, 3)
    before = [t.clone() for t in (q, kk, vv)]
    out, lse = attention_decode(q, kk, vv, scale, causal=causal, window=window, softcap=softcap, q_pos=q_pos,
                                mask=mm, sinks=sink, num_splits=num_splits, config=config)
    for a, b in zip(before, (q, kk, vv)):  # inputs untouched
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    check(out, lse, ref, dtype)
    return out, lse


# --------------------------------------------------------------------------------------------------- main matrix
FEATURES = [  # cycled through the shape matrix below
    dict(),
    dict(qpos=None),  # bottom-right: no unfilled tail
    dict(window=24),
    dict(softcap=5.0),  # small cap: scores ~ +-3 are bent noticeably
    dict(sinks=True),
    dict(mask="bool"),
    dict(mask="add", qpos="scatter"),
    dict(causal=False),
    dict(causal=False, mask="add", qpos=None),
    dict(window=100, softcap=5.0, sinks=True, mask="bool"),
    dict(window=7, mask="add", sinks=True, qpos="scatter"),
    dict(qpos="scatter", softcap=30.0),
]
SHAPES = list(itertools.product([1, 4], [37, 300], [(4, 4), (8, 2)], [64, 80]))  # Sq, Skv, (Hq, Hkv), D
CASES = [(sq, skv, heads, d, dtype, splits, FEATURES[i % len(FEATURES)], ["bhsd", "bshd", "fused"][i % 3])
         for i, ((sq, skv, heads, d), dtype, splits) in enumerate(
             itertools.product(SHAPES, [BF16, FP32], [1, 3, None]))]


def _id(c):
    sq, skv, (hq, hkv), d, dtype, splits, feat, layout = c
    tags = "-".join(f"{k}{'' if v is True else v}" for k, v in feat.items())
    name = f"sq{sq}-kv{skv}-h{hq}x{hkv}-d{d}-{str(dtype)[6:]}-s{splits or 'auto'}-{layout}"
    return f"{name}-{tags}" if tags else name


@pytest.mark.parametrize("sq,skv,heads,d,dtype,splits,features,layout", CASES, ids=[_id(c) for c in CASES])
def test_decode(sq, skv, heads, d, dtype, splits, features, layout):
    run_case(2, heads[0], heads[1], sq, skv, d, dtype, splits, layout=layout, **features)


# ----------------------------------------------------------------------------------------------- edges and paths
@pytest.mark.parametrize("splits", [1, 4])
def test_rows_with_nothing_allowed(splits):
    """Rows whose every key is masked: out 0 and lse -inf; with a sink, out 0 and lse = the sink. With 4 splits of
    ~37 keys some splits of other rows are empty too (their lse -inf must not poison the merge)."""
    batch, hq, hkv, sq, skv, d = 2, 4, 2, 4, 37, 64
    q = make_q(batch, hq, sq, d, BF16, "bhsd")
    k, v = make_cache(batch, hkv, skv, d, BF16, "bhsd")
    q_pos = torch.tensor([3, 20, 21, 36], device=DEVICE)
    m = torch.rand(batch, hq, sq, skv, device=DEVICE) < 0.5
    m[0, 1, 2] = False  # one row of one head
    m[1, :, 0] = False  # query 0 of every head of batch 1
    m[:, :, 3, 30:] = False  # the last query sees keys < 30 only: the last split is empty for it
    for sink in (None, torch.randn(hq, device=DEVICE)):
        out, lse = attention_decode(q, k, v, d ** -0.5, q_pos=q_pos, mask=m, sinks=sink, num_splits=splits)
        ref = reference(q, k, v, d ** -0.5, q_pos=q_pos, mask=m, sinks=sink)
        check(out, lse, ref, BF16)
        for b, h, i in ((0, 1, 2), (1, 0, 0), (1, 3, 0)):
            assert torch.equal(out[b, h, i], torch.zeros_like(out[b, h, i]))
            if sink is None:
                assert lse[b, h, i].item() == float("-inf")
            else:  # sink * log2(e) * ln(2) in fp32: a few ulps
                torch.testing.assert_close(lse[b, h, i], sink[h].float(), rtol=4 * U[FP32], atol=0)


@pytest.mark.filterwarnings("ignore:overflow encountered in multiply:RuntimeWarning")  # finfo.min * log2(e): -inf
@pytest.mark.parametrize("dtype", [BF16, FP32])
def test_finfo_min_mask(dtype):
    """HF masks with an additive finfo.min: a row masked everywhere is then uniform over its (causally allowed)
    keys, as in eager softmax, not empty -- whatever the split count, though the splits hold different numbers of
    such keys (3 splits of 300 keys: 128, 128, 44). Partly masked rows ignore the masked keys."""
    batch, hq, hkv, sq, skv, d = 1, 4, 2, 2, 300, 64
    q = make_q(batch, hq, sq, d, dtype, "bhsd")
    k, v = make_cache(batch, hkv, skv, d, dtype, "bhsd")
    m = torch.where(torch.rand(batch, 1, sq, skv, device=DEVICE) < 0.5, 0.0, torch.finfo(dtype).min).to(dtype)
    m[..., 0, :] = torch.finfo(dtype).min  # query 0: masked everywhere
    ref = reference(q, k, v, d ** -0.5, mask=m)
    uniform = v.double().repeat_interleave(hq // hkv, 1)[:, :, : skv - 1].mean(2)  # query 0 sits at skv - 2
    torch.testing.assert_close(ref[0][:, :, 0], uniform, rtol=1e-12, atol=1e-12)  # the reference agrees with eager
    for splits in (1, 3):
        out, lse = attention_decode(q, k, v, d ** -0.5, mask=m, num_splits=splits)
        check(out, lse, ref, dtype)


def test_window_empty_splits():
    """A long static cache, a short window near its start: with 8 splits most splits of the (clipped) range hold
    one block or none, and everything outside the window is NaN."""
    run_case(1, 4, 1, 2, 1000, 64, BF16, 8, window=40, qpos="fill", config=(16, 4, 2))


def test_auto_splits_long_cache():
    """Auto splits on a long cache (B1, one kv head: 8 splits in the interpreter's 4-"SM" model), consecutive
    decode positions, NaN tail, small blocks so every split loops over several."""
    skv = 2048
    assert default_num_splits(1, skv, 4) == 8
    run_case(1, 8, 1, 3, skv, 64, BF16, None, qpos="fill", config=(32, 4, 2))


def test_row_chunks():
    """Hq/Hkv 16 x Sq 16 = 256 rows: two row chunks of 128 per kv head, each reading K/V itself."""
    run_case(1, 16, 1, 16, 64, 64, BF16, 2, qpos="fill", sinks=True, window=30)


@pytest.mark.parametrize("dtype", [BF16, FP32])
def test_qwen3_8b_heads(dtype):
    """Qwen3-8B's group of 8 q heads per kv head at head dim 128, one query over a 300-key static cache."""
    run_case(1, 16, 2, 1, 300, 128, dtype, None, window=0)


def test_fp16_and_odd_heads():
    """fp16, 6 q heads over 3 kv heads (2 x Sq 3 = 6 rows padded to 16), head dim 96."""
    run_case(2, 6, 3, 3, 50, 96, FP16, 3, mask="add", softcap=10.0)


def test_splits_agree_and_deterministic():
    """1, 3 and 7 splits give the same result up to the fp32 merge (and the rounding it may flip); a launch
    repeated is bit for bit the same."""
    batch, hq, hkv, sq, skv, d = 2, 8, 2, 2, 300, 64
    q = make_q(batch, hq, sq, d, BF16, "bhsd")
    k, v = make_cache(batch, hkv, skv, d, BF16, "bhsd")
    outs = [attention_decode(q, k, v, 0.1, num_splits=s) for s in (1, 3, 7, 7)]
    assert all(torch.equal(a, b) for a, b in zip(outs[2], outs[3]))
    for out, lse in outs[1:3]:
        assert ((out.double() - outs[0][0].double()).norm() / outs[0][0].double().norm()).item() <= U[BF16]
        torch.testing.assert_close(lse, outs[0][1], atol=LSE_ATOL, rtol=LSE_RTOL)


def test_default_num_splits():
    """The occupancy heuristic on the H200 (132 SMs): enough programs for 2 waves, >= 256 keys a split."""
    assert default_num_splits(64 * 8, 4096, 132) == 1  # the anchor shape: 512 programs already fill 2 waves
    assert default_num_splits(1 * 8, 32768, 132) == 33  # one sequence, 32K cache: 264 programs
    assert default_num_splits(1 * 8, 4096, 132) == 16  # ... capped by 256 keys a split
    assert default_num_splits(4 * 8, 100, 132) == 1  # too short to split
    assert default_num_splits(1, 1 << 20, 132) == 128  # capped


def test_empty_and_errors():
    q = torch.randn(0, 4, 1, 64, device=DEVICE)
    k = torch.randn(0, 2, 16, 64, device=DEVICE)
    out, lse = attention_decode(q, k, k, 0.125)
    assert out.shape == (0, 4, 1, 64) and lse.shape == (0, 4, 1)
    q = torch.randn(1, 3, 1, 64, device=DEVICE)
    k = torch.randn(1, 2, 16, 64, device=DEVICE)
    with pytest.raises(ValueError, match="multiple"):
        attention_decode(q, k, k, 0.125)
    with pytest.raises(ValueError, match="dtypes"):
        attention_decode(q[:, :2].to(BF16), k, k, 0.125)
    with pytest.raises(ValueError, match="q_pos"):
        attention_decode(q[:, :2], k, k, 0.125, q_pos=torch.zeros(2, dtype=torch.long, device=DEVICE))


def test_reference_sanity():
    """The reference itself, on a case small enough to spell out: one query at position 2 of a 4-key cache sees
    keys 0..2; with a window of 2, keys 1..2; a sink adds exp(sink) to the denominator."""
    q = torch.tensor([[[[1.0, 0.0]]]])
    k = torch.tensor([[[[1.0, 0.0], [0.0, 1.0], [2.0, 0.0], [9.0, 9.0]]]])
    v = torch.tensor([[[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [5.0, 5.0]]]])
    pos = torch.tensor([2])
    out, lse, _ = reference(q, k, v, 1.0, q_pos=pos, window=2, sinks=torch.tensor([0.5]))
    w = [math.exp(0.0), math.exp(2.0)]  # scores of keys 1 and 2
    den = sum(w) + math.exp(0.5)
    expected = torch.tensor([w[1], w[0] + w[1]], dtype=torch.float64) / den  # w1 * (0, 1) + w2 * (1, 1)
    torch.testing.assert_close(out[0, 0, 0], expected, rtol=1e-12, atol=0)
    assert abs(lse.item() - math.log(den)) < 1e-12


_COMPILE_BODY = r"""
import torch
from mojo_compile.kernels import attention_decode as A

FLOATS = ("qk_scale", "cap_in", "cap_out")
heavy = dict(CAUSAL=True, WINDOWED=True, SOFTCAP=True, HAS_QPOS=True, MASK_KIND=2, HAS_SINK=True, DIRECT=False)
plain = dict(CAUSAL=True, WINDOWED=False, SOFTCAP=False, HAS_QPOS=True, MASK_KIND=1, HAS_SINK=False, DIRECT=True)
for d, flags in ((80, heavy), (128, plain)):
    block_n, num_warps, num_stages = A._config(d, torch.bfloat16, 16)
    consts = dict(HQ=32, SQ=1, GROUP=4, D=d, ROW_CHUNKS=1, DOT_PRECISION="tf32", BLOCK_M=16, BLOCK_N=block_n,
                  BLOCK_D=triton.next_power_of_2(d), INTERPRET=False, PERSISTENT=False, **flags)
    work = "bf16" if flags["DIRECT"] else "fp32"  # the outputs, or the fp32 partials of each split
    pointers = dict(Q="bf16", K="bf16", V="bf16", QPOS="i32", MASK="u8" if flags["MASK_KIND"] == 1 else "bf16",
                    SINKS="bf16", OUT=work, LSE="fp32", DEN="fp32")
    compile_kernel(A._split_kernel, consts, pointers, FLOATS, num_warps=num_warps, num_stages=num_stages)
    block_r, block_s, block_d, merge_warps = A._merge_config(8, d, 32)
    compile_kernel(A._merge_kernel, dict(HQ=32, SQ=1, D=d, HAS_SINK=flags["HAS_SINK"], NATURAL=flags["MASK_KIND"] == 2,
                                         BLOCK_R=block_r, BLOCK_S=block_s, BLOCK_D=block_d, INTERPRET=False,
                                         PERSISTENT=False),
                   dict(O_WS="fp32", M_WS="fp32", DEN_WS="fp32", SINKS="bf16", OUT="bf16", LSE="fp32"),
                   num_warps=merge_warps)
"""


def test_compiles_for_hopper():
    """The split and merge kernels compile for sm_90 (tests/hopper.py): every feature at D = 80 with fp32 partials;
    a bool mask at D = 128 written directly."""
    compile_for_hopper(_COMPILE_BODY, 4)


# ------------------------------------------------------------------------------- bool mask over a static cache
def key_blocks_poisoned(t, allowed_keys, block_n):
    """A copy of k or v [B, Hkv, Skv, D] for a bool key mask allowed_keys [B, Skv] (True where any query of the
    batch row may attend): in every key block of block_n that no query may attend, NaN (a read of it would turn
    out into NaN: p = 0 times NaN); in the disallowed keys of the other blocks, 1e4 (read, and must be masked)."""
    batch, skv = allowed_keys.shape
    blocks = torch.nn.functional.pad(allowed_keys, (0, -skv % block_n)).view(batch, -1, block_n).any(-1)
    dead = blocks.repeat_interleave(block_n, 1)[:, :skv].logical_not()
    t = t.masked_fill(~allowed_keys[:, None, :, None], 1e4)
    return t.masked_fill(dead[:, None, :, None], NAN)


def run_bool_mask(q, k, v, mask, splits, block_n, sinks=None):
    """The kernel without positions or causal (HF's StaticCache decode step: the mask is the only bound) on k / v
    poisoned outside the blocks the mask allows, against the fp64 reference on the clean k / v."""
    d = q.shape[-1]
    ref = reference(q, k, v, d ** -0.5, causal=False, mask=mask, sinks=sinks)
    keys = mask.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2]).any(1).any(1)  # [B, Skv]
    kk, vv = key_blocks_poisoned(k, keys, block_n), key_blocks_poisoned(v, keys, block_n)
    out, lse = attention_decode(q, kk, vv, d ** -0.5, causal=False, mask=mask, sinks=sinks, num_splits=splits,
                                config=(block_n, 4, 2))
    check(out, lse, ref, q.dtype)
    return out, lse


@pytest.mark.parametrize("splits", [1, None, 16])
@pytest.mark.parametrize("sq", [1, 3])
@pytest.mark.parametrize("dtype", [BF16, FP32])
def test_bool_mask_unfilled_cache(dtype, sq, splits):
    """HF generate with a StaticCache: a bool mask over the whole 1000-key cache, True on the filled slots only,
    a different filled length per batch row (row 1 also left-padded); Sq 3 (a few speculative tokens) masks the
    new tokens causally among themselves ([B, 1, Sq, Skv]). GQA 4. Key blocks no query may attend are NaN: only
    the mask is read there (16 splits: most splits lie wholly in the unfilled tail)."""
    batch, hq, hkv, skv, d, block_n = 3, 8, 2, 1000, 64, 32
    q = make_q(batch, hq, sq, d, dtype, "bhsd")
    k, v = make_cache(batch, hkv, skv, d, dtype, "bhsd")
    filled = torch.tensor([37, 300, 613], device=DEVICE)  # 37 and 613: the last filled block is partial
    j = torch.arange(skv, device=DEVICE)
    ends = filled[:, None] - sq + 1 + torch.arange(sq, device=DEVICE)  # query i sees keys < ends[b, i]
    mask = (j < ends[:, :, None])[:, None]  # [B, 1, Sq, Skv]
    mask[1, ..., :70] = False  # left padding: the first two blocks and part of the third
    if sq == 1:
        mask = mask[:, :, :1]  # [B, 1, 1, Skv], as the decode step builds it
    run_bool_mask(q, k, v, mask, splits, block_n)


@pytest.mark.parametrize("splits", [1, 4])
def test_bool_mask_holes(splits):
    """Holes: whole blocks masked in the middle of the filled range (NaN, not read), a partial hole, one query
    row that no key is allowed for (the others of the tile still attend: out 0, lse -inf for it alone), and a
    batch row masked everywhere (no block read at all: out 0, lse -inf); then with sinks (lse = the sink)."""
    batch, hq, hkv, sq, skv, d, block_n = 2, 4, 2, 2, 500, 64, 32
    q = make_q(batch, hq, sq, d, BF16, "bhsd")
    k, v = make_cache(batch, hkv, skv, d, BF16, "bhsd")
    mask = torch.zeros(batch, 1, sq, skv, dtype=torch.bool, device=DEVICE)
    mask[0, :, 0, :400] = True
    mask[0, :, 0, 64:160] = False  # blocks 2..4 masked for every row of batch 0 (query 1 has nothing)
    mask[0, :, 0, 200:210] = False  # a hole inside a block
    for sink in (None, torch.randn(hq, device=DEVICE)):
        out, lse = run_bool_mask(q, k, v, mask, splits, block_n, sinks=sink)
        for b, i in ((0, 1), (1, 0), (1, 1)):
            assert torch.equal(out[b, :, i], torch.zeros_like(out[b, :, i]))
            if sink is None:
                assert (lse[b, :, i] == float("-inf")).all()
            else:  # sink * log2(e) * ln(2) in fp32: a few ulps
                torch.testing.assert_close(lse[b, :, i], sink.float(), rtol=4 * U[FP32], atol=0)
