"""The Triton flash-attention kernels (kernels/attention.py), forward and backward, against an independent fp64
reference written here with plain torch: scores, an explicit [S_q, S_kv] allowed-matrix built from the structure
(causal / window / positions), the masks, the sink column, softmax; gradients by fp64 autograd of that reference.
On CPU the kernels run under TRITON_INTERPRET=1 (see conftest.py).

Tolerances bound the normwise error ||x - ref|| (Frobenius) by bounds derived from the computation and evaluated on
the case's own reference tensors, so they stay tight where attention is peaked and where it is flat:

- u: unit roundoff of the tensors' dtype (the kernels round each output once); w: that of the dot operands p and
  dS, which the kernels round to the input dtype on a GPU (bf16 tensor cores), 0 in the interpreter (fp32 there).
- eps: relative error of a recomputed probability from fp32 alone: the score dot (D * u32 * scale * |q|.|k|, twice:
  the score and the row max / lse), the exp2 argument (~4 u32 |s|) and the sums over S_kv keys.
- out: u ||out|| + (eps + w) || P |V| ||. lse (absolute, per row): eps + 2 u32 |lse|.
- dS = P o (dP - delta) (o (1 - tanh^2)). delta = rowsum(dO * O) is computed from the O the backward is handed, the
  forward's rounded output: its error is |dO.(O - O_exact)| (evaluated, not bounded) plus the fp32 sum's D u32 |dO|.|O|;
  dP is an fp32 dot (D u32 |dO|.|V|); p as above. Per element,
  E = P o (2 eps |dP - delta| + |dO.(O - O_exact)| + D u32 (|dO|.|O| + |dO|.|V|)) + (w + S_kv u32) |dS|.
  dq: u ||dq|| + scale || E |K| ||; dk: u ||dk|| + scale || E^T |Q| || (summed over the GQA group);
  dv: u ||dv|| + || ((eps + w + S u32) P)^T |dO| || (S: the rows summed); dsink: the sum over rows of
  p_sink (eps |delta| + delta's error above), plus the rounding to the sink's dtype.
"""
import math

import pytest
import torch
from conftest import DEVICE, KERNEL_TARGET_OK  # sets TRITON_INTERPRET=1 before the kernels are defined
from hopper import compile_for_hopper

from mojo_compile.kernels.attention import attention_bwd, attention_fwd

pytestmark = [
    pytest.mark.skipif(not KERNEL_TARGET_OK, reason="needs CUDA or TRITON_INTERPRET=1"),
    # the interpreter (numpy) reports finfo.min * log2(e) overflowing to -inf: the intended exp2 argument there
    pytest.mark.filterwarnings("ignore:overflow encountered in multiply:RuntimeWarning"),
]

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
U = {BF16: 2.0 ** -8, FP16: 2.0 ** -11, FP32: 2.0 ** -24}
U32 = U[FP32]
INTERPRETED = DEVICE == "cpu"


def err(out, ref):
    return (out.double() - ref.double()).norm().item()


def norm(t):
    return t.double().norm().item()


# ----------------------------------------------------------------------------------------------------- reference
def reference(q, k, v, scale, causal=False, window=0, softcap=0.0, q_pos=None, mask=None, sinks=None):
    """fp64 attention. Returns (out, lse, probabilities over the keys, raw q.k products (for gradients))."""
    batch, hq, s_q, _ = q.shape
    s_kv = k.shape[2]
    group = hq // k.shape[1]
    k, v = k.double().repeat_interleave(group, 1), v.double().repeat_interleave(group, 1)  # head h: kv h // group
    raw = q.double() @ k.transpose(-1, -2)
    s = raw * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    pos = q_pos.long() if q_pos is not None else torch.arange(s_q, device=q.device) + (s_kv - s_q)
    key = torch.arange(s_kv, device=q.device)
    allowed = torch.ones(s_q, s_kv, dtype=torch.bool, device=q.device)
    if causal:
        allowed &= key[None, :] <= pos[:, None]
    if window:
        allowed &= key[None, :] > pos[:, None] - window
    allowed = allowed.expand(batch, hq, s_q, s_kv)
    if mask is not None and mask.dtype == torch.bool:
        allowed = allowed & mask
    elif mask is not None:
        s = s + mask.double()
    s = s.masked_fill(~allowed, float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks.double()[None, :, None, None].expand(batch, hq, s_q, 1)], dim=-1)
    m = s.amax(-1, keepdim=True).detach()
    m = torch.where(torch.isinf(m), 0.0, m)  # rows with nothing allowed: e = 0, no NaN
    e = torch.exp(s - m)
    denom = e.sum(-1, keepdim=True)
    p = e / torch.where(denom == 0, 1.0, denom)
    lse = (torch.log(denom) + m).squeeze(-1)
    p = p[..., :s_kv]  # the sink's probability is dropped
    return p @ v, lse, p, raw


# ---------------------------------------------------------------------------------------------------------- inputs
def make(batch, heads, seq, d, dtype, layout="bhsd"):
    """[B, H, S, D] contiguous, or a transposed view of [B, S, H, D] storage (as HF hands q/k/v over)."""
    if layout == "bshd":
        return torch.randn(batch, seq, heads, d, device=DEVICE, dtype=dtype).transpose(1, 2)
    return torch.randn(batch, heads, seq, d, device=DEVICE, dtype=dtype)


def additive(allowed, dtype):
    """HF's float mask: 0 where allowed, finfo.min elsewhere (finite)."""
    return torch.zeros(allowed.shape, device=DEVICE, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)


def mask_bool_random(batch, heads, s_q, s_kv):
    """A per-head [B, Hq, S_q, S_kv] bool mask with a row that has nothing to attend to (out 0, lse -inf)."""
    m = torch.rand(batch, heads, s_q, s_kv, device=DEVICE) < 0.7
    m[0, 1, 1] = False
    return m


def mask_padding(batch, s_q, s_kv, dtype):
    """Left padding (batch row 1 starts 3 keys late) plus causal, as a finite additive [B, 1, S_q, S_kv] mask:
    the padded queries of row 1 see no key, a fully masked row that eager softmax makes uniform."""
    key = torch.arange(s_kv, device=DEVICE)
    pos = torch.arange(s_q, device=DEVICE) + (s_kv - s_q)
    start = torch.tensor([0, 3], device=DEVICE)[:batch]
    allowed = (key[None, None, :] <= pos[None, :, None]) & (key[None, None, :] >= start[:, None, None])
    return additive(allowed[:, None], dtype)


def mask_keys(batch, s_q, s_kv, dtype):
    """Key padding, [B, 1, 1, S_kv] bool: batch row 1 left-padded by 5 keys (with causal, its first rows see no
    key) and a few random holes; the one-row-of-keys form the kernels load per key tile."""
    keep = torch.rand(batch, s_kv, device=DEVICE) < 0.85
    keep[:, -1] = True
    keep[1, :5] = False
    return keep[:, None, None, :]


def mask_key_range(starts, ends):
    """Contiguous key padding, [B, 1, 1, S_kv] bool: batch row b allows keys [starts[b], ends[b]) (an empty range
    masks the whole row): the kernels take it as a key range, skipping the tiles outside it, and load no mask."""
    def build(batch, s_q, s_kv, dtype):
        key = torch.arange(s_kv, device=DEVICE)
        keep = (key[None, :] >= torch.tensor(starts, device=DEVICE)[:, None]) & \
            (key[None, :] < torch.tensor(ends, device=DEVICE)[:, None])
        return keep[:batch, None, None, :]
    return build


def mask_mixed_holes(batch, s_q, s_kv, dtype):
    """Key padding where one batch row has a hole in its range and the others none (one contiguous, one empty):
    the two launches each take their own rows and must leave the other's outputs alone."""
    keep = mask_key_range([7, 0, 0], [s_kv, 30, 0])(batch, s_q, s_kv, dtype).clone()
    keep[1, ..., 12] = False
    return keep


def mask_dense(s_q, s_kv, dtype):
    """A [S_q, S_kv] additive mask (broadcast over batch and heads) with one fully masked row."""
    allowed = torch.rand(s_q, s_kv, device=DEVICE) < 0.6
    allowed[2] = False
    return additive(allowed, dtype)


# name: (B, Hq, Hkv, S_q, S_kv, D, dtype, layout, options); options may hold callables building tensors
CASES = {
    "causal-square-gqa2-d64-bf16": (2, 4, 2, 33, 33, 64, BF16, "bshd", dict(causal=True)),
    "causal-bottom-right-gqa4-d80-bf16": (1, 4, 1, 7, 40, 80, BF16, "bhsd", dict(causal=True)),
    "decode-qpos-gqa4-d64-bf16": (2, 4, 1, 2, 16, 64, BF16, "bshd", dict(causal=True, q_pos=[5, 9])),
    # static cache: 40 slots, positions 3..9 filled; causal keeps the unfilled slots out
    "static-cache-qpos-mha-d80-fp32": (1, 2, 2, 7, 40, 80, FP32, "bhsd", dict(causal=True, q_pos=list(range(3, 10)))),
    "decode-sq1-gqa2-d80-bf16": (2, 4, 2, 1, 40, 80, BF16, "bhsd", dict(causal=True)),
    "window-gqa2-d64-bf16": (1, 4, 2, 40, 40, 64, BF16, "bshd", dict(causal=True, window=8)),
    # positions in no particular order, with a window: the dK/dV kernel's run-time block skipping
    "window-qpos-unordered-gqa2-d64-fp32": (1, 4, 2, 7, 40, 64, FP32, "bhsd",
                                            dict(causal=True, window=6, q_pos=[30, 2, 17, 39, 9, 23, 16])),
    "softcap-window-gqa2-d64-bf16": (1, 4, 2, 33, 33, 64, BF16, "bhsd",
                                     dict(causal=True, window=16, softcap=2.0, scale=0.5)),
    "sinks-window-gqa4-d64-bf16": (1, 8, 2, 7, 40, 64, BF16, "bshd", dict(causal=True, window=8, sinks=BF16)),
    # S_q > S_kv bottom-right: the first two rows see no key; with a sink they are sink-only rows
    "sinks-empty-rows-gqa2-d64-fp32": (1, 2, 1, 7, 5, 64, FP32, "bhsd", dict(causal=True, sinks=FP32)),
    "causal-empty-rows-mha-d64-bf16": (1, 2, 2, 7, 5, 64, BF16, "bhsd", dict(causal=True)),
    "bool-mask-gqa2-d64-bf16": (2, 4, 2, 7, 40, 64, BF16, "bshd",
                                dict(mask=lambda b, sq, skv, dt: mask_bool_random(b, 4, sq, skv))),
    "additive-padding-mha-d64-fp32": (2, 2, 2, 7, 7, 64, FP32, "bhsd", dict(mask=mask_padding)),
    "additive-padding-gqa2-d80-bf16": (2, 4, 2, 7, 7, 80, BF16, "bshd", dict(mask=mask_padding)),
    "additive-dense-gqa2-d64-bf16": (1, 4, 2, 33, 40, 64, BF16, "bhsd",
                                     dict(mask=lambda b, sq, skv, dt: mask_dense(sq, skv, dt))),
    # gpt-oss under torch.compile: HF's padding mask with causal, a window and sinks
    "additive-padding-causal-sinks-gqa2-d64-bf16": (2, 4, 2, 7, 7, 64, BF16, "bshd",
                                                    dict(mask=mask_padding, causal=True, window=4, sinks=FP32)),
    "key-padding-causal-gqa2-d64-bf16": (2, 4, 2, 33, 33, 64, BF16, "bshd", dict(mask=mask_keys, causal=True)),
    "key-padding-window-mha-d80-fp32": (2, 2, 2, 19, 19, 80, FP32, "bhsd", dict(mask=mask_keys, causal=True,
                                                                                 window=6)),
    "key-padding-plain-gqa4-d64-bf16": (2, 4, 1, 7, 40, 64, BF16, "bhsd",
                                        dict(mask=lambda b, sq, skv, dt: mask_keys(b, sq, skv, dt)[0, 0, 0])),
    # left padding past whole key tiles (skipped), right padding, and a row with no key at all
    "key-range-causal-gqa2-d64-bf16": (3, 4, 2, 72, 72, 64, BF16, "bshd",
                                       dict(mask=mask_key_range([21, 0, 0], [72, 59, 0]), causal=True)),
    "key-range-window-mha-d64-fp32": (2, 2, 2, 33, 33, 64, FP32, "bhsd",
                                      dict(mask=mask_key_range([17, 3], [33, 30]), causal=True, window=9)),
    "key-range-plain-qpos-gqa4-d80-bf16": (2, 4, 1, 7, 40, 80, BF16, "bhsd",
                                           dict(mask=mask_key_range([5, 16], [37, 33]), causal=True,
                                                q_pos=[30, 2, 17, 39, 9, 23, 16])),
    "key-range-mixed-holes-gqa2-d64-bf16": (3, 4, 2, 40, 40, 64, BF16, "bshd",
                                            dict(mask=mask_mixed_holes, causal=True)),
    "plain-mha-d64-fp32": (1, 2, 2, 7, 7, 64, FP32, "bhsd", dict()),
    "causal-gqa8-d128-bf16": (1, 8, 1, 19, 19, 128, BF16, "bshd", dict(causal=True)),  # Qwen3-8B's ratio and head dim
    "window-gqa8-d128-fp32": (1, 8, 1, 13, 21, 128, FP32, "bhsd", dict(causal=True, window=5)),
    "causal-gqa2-d80-fp16": (1, 4, 2, 33, 40, 80, FP16, "bshd", dict(causal=True)),
}


def build(name):
    batch, hq, hkv, s_q, s_kv, d, dtype, layout, options = CASES[name]
    q = make(batch, hq, s_q, d, dtype, layout)
    k = make(batch, hkv, s_kv, d, dtype, layout)
    v = make(batch, hkv, s_kv, d, dtype, layout)
    kw = dict(options)
    kw.setdefault("scale", 1.0 / math.sqrt(d))
    if "q_pos" in kw:
        kw["q_pos"] = torch.tensor(kw["q_pos"], device=DEVICE, dtype=torch.int32)
    if "sinks" in kw:
        kw["sinks"] = torch.randn(hq, device=DEVICE).to(kw["sinks"])
    if callable(kw.get("mask")):
        kw["mask"] = kw["mask"](batch, s_q, s_kv, dtype)
    return q, k, v, kw


# ---------------------------------------------------------------------------------------------------------- bounds
def _eps(q, k, raw, scale):
    """Relative error of a recomputed probability from the fp32 arithmetic (see the module docstring)."""
    d, s_kv = q.shape[-1], k.shape[2]
    group = q.shape[1] // k.shape[1]
    dot_abs = q.double().abs() @ k.double().abs().repeat_interleave(group, 1).transpose(-1, -2)
    return U32 * (2 * d * scale * dot_abs.max().item() + 8 * scale * raw.abs().max().item() + 2 * s_kv + 16)


def _group_sum(t, hkv):
    return t.view(t.shape[0], hkv, -1, *t.shape[2:]).sum(2)


def check(q, k, v, scale, config=None, **kw):
    """attention_fwd and attention_bwd against the fp64 reference, within the bounds of the module docstring."""
    dtype, hkv, d = q.dtype, k.shape[1], q.shape[-1]
    group = q.shape[1] // hkv
    u, w = U[dtype], (0.0 if INTERPRETED or dtype == FP32 else U[dtype])
    before = [t.clone() for t in (q, k, v)]

    out, lse = attention_fwd(q, k, v, scale, config=config, **kw)
    assert all(torch.equal(a, b) for a, b in zip(before, (q, k, v)))  # inputs untouched
    assert out.shape == q.shape and out.dtype == dtype and out.is_contiguous()
    assert lse.shape == q.shape[:3] and lse.dtype == FP32

    sinks = kw.get("sinks")
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    sink_leaf = sinks.detach().double().requires_grad_() if sinks is not None else None
    ref_out, ref_lse, p, raw = reference(*leaves, scale, **{**kw, "sinks": sink_leaf})
    ref_lse, p = ref_lse.detach(), p.detach()
    eps = _eps(q, k, raw, scale)
    v_abs = v.double().abs().repeat_interleave(group, 1)

    assert not out.isnan().any() and not lse.isnan().any()
    tol = u * norm(ref_out) + (eps + w) * norm(p @ v_abs)
    assert err(out, ref_out) <= tol, (err(out, ref_out), tol)
    empty = torch.isinf(ref_lse)
    assert torch.equal(torch.isinf(lse), empty) and (lse[empty] < 0).all()  # -inf exactly where nothing is allowed
    assert (out[empty] == 0).all()
    lse_err = (lse.double() - ref_lse).abs()[~empty]
    assert (lse_err <= eps + 2 * U32 * ref_lse.abs()[~empty]).all(), lse_err.max()

    # Backward, with a grad of another layout than out's (strides differ).
    g_out = torch.randn(out.transpose(1, 2).shape, device=DEVICE, dtype=dtype).transpose(1, 2)
    dq, dk, dv, dsinks = attention_bwd(g_out, q, k, v, out, lse, scale, config=config, **kw)
    inputs = leaves + [raw] + ([sink_leaf] if sinks is not None else [])
    grads = torch.autograd.grad(ref_out, inputs, g_out.double())
    ref_dq, ref_dk, ref_dv, d_raw = grads[:4]
    for g, ref, like in ((dq, ref_dq, q), (dk, ref_dk, k), (dv, ref_dv, v)):
        assert g.shape == like.shape and g.dtype == like.dtype and g.is_contiguous() and not g.isnan().any()

    g64, o64 = g_out.double(), ref_out.detach()
    dp = g64 @ v.double().repeat_interleave(group, 1).transpose(-1, -2)
    delta = (g64 * o64).sum(-1, keepdim=True)
    delta_err = ((g64 * (out.double() - o64)).sum(-1, keepdim=True).abs()
                 + d * U32 * (g64.abs() * o64.abs()).sum(-1, keepdim=True))
    do_v = g64.abs() @ v_abs.transpose(-1, -2)
    err_ds = (p * (2 * eps * (dp - delta).abs() + delta_err + d * U32 * do_v)
              + (w + k.shape[2] * U32) * d_raw.abs() / scale)
    k_abs = k.double().abs().repeat_interleave(group, 1)
    tol_dq = u * norm(ref_dq) + scale * norm(err_ds @ k_abs)
    tol_dk = u * norm(ref_dk) + scale * norm(_group_sum(err_ds.transpose(-1, -2) @ q.double().abs(), hkv))
    rows = q.shape[2] * group
    tol_dv = u * norm(ref_dv) + (eps + w + rows * U32) * norm(_group_sum(p.transpose(-1, -2) @ g64.abs(), hkv))
    for name, g, ref, tol in (("dq", dq, ref_dq, tol_dq), ("dk", dk, ref_dk, tol_dk), ("dv", dv, ref_dv, tol_dv)):
        assert err(g, ref) <= tol, (name, err(g, ref), tol, norm(ref))
    if sinks is None:
        assert dsinks is None
    else:
        p_sink = torch.where(empty, 0.0, torch.exp(sink_leaf.detach()[None, :, None] - ref_lse))
        bound = (p_sink * (eps * delta.squeeze(-1).abs() + delta_err.squeeze(-1))).sum((0, 2))
        ref_ds = grads[4]
        assert dsinks.shape == sinks.shape and dsinks.dtype == sinks.dtype
        assert ((dsinks.double() - ref_ds).abs() <= bound + U[sinks.dtype] * ref_ds.abs()).all(), (dsinks, ref_ds)


# ------------------------------------------------------------------------------------------------------------ tests
@pytest.mark.parametrize("name", list(CASES))
def test_attention(name):
    q, k, v, kw = build(name)
    check(q, k, v, **kw)


def test_key_masks_load_one_row_of_keys():
    """[B, 1, 1, S_kv] and [S_kv] bool masks take the key-row path; a per-row or per-head bool mask does not."""
    from mojo_compile.kernels.attention import MASK_BOOL, MASK_KEYS, _extras

    q, k = make(2, 4, 5, 16, FP32), make(2, 2, 9, 16, FP32)
    for shape, kind in (((2, 1, 1, 9), MASK_KEYS), ((9,), MASK_KEYS), ((1, 9), MASK_KEYS), ((2, 1, 5, 9), MASK_BOOL),
                        ((2, 4, 1, 9), MASK_BOOL)):
        assert _extras(q, k, None, torch.ones(shape, dtype=torch.bool, device=DEVICE), None)[1] == kind, shape


def test_key_ranges():
    """Each key-mask row's first allowed key, last allowed key + 1, and whether a key between them is masked."""
    from mojo_compile.kernels.attention import _key_ranges

    keys = torch.tensor([[0, 0, 1, 1, 1, 0], [1, 0, 1, 0, 0, 1], [0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1]],
                        dtype=torch.bool, device=DEVICE)
    expected = [[2, 5, 0], [0, 6, 1], [6, 0, 0], [0, 6, 0]]
    assert _key_ranges(keys).tolist() == expected
    assert _key_ranges(keys[:, :0]).tolist() == [[0, 0, 0]] * 4


# Small tiles (16 stacked rows = 8 queries x 2 heads, 16 keys) over every offset S_kv - S_q modulo 16 and windows
# from the diagonal alone to wider than a tile, with the default positions and with the same positions reversed
# (explicit q_pos: any order): row blocks and key tiles start and end on every kind of boundary, so the
# tile-skipping ranges of all three kernels (and the dK/dV kernel's run-time skip under explicit positions) must be
# exact or these cases differ from the reference (each off-by-one in those ranges fails at least one case here).
SWEEP = [(offset, window, reverse) for offset in range(16) for window in (0, 1, 5, 17, 30) for reverse in (False, True)]


@pytest.mark.parametrize("offset,window,reverse", SWEEP,
                         ids=[f"off{a}-w{b}" + ("-reversed" if c else "") for a, b, c in SWEEP])
def test_tile_boundaries(offset, window, reverse):
    s_q = 19
    s_kv = s_q + offset
    q, k, v = make(1, 2, s_q, 16, FP32), make(1, 1, s_kv, 16, FP32), make(1, 1, s_kv, 16, FP32)
    q_pos = (torch.arange(s_q, device=DEVICE) + offset).flip(0) if reverse else None
    check(q, k, v, 0.25, config=(16, 16, 4, 1), causal=True, window=window, q_pos=q_pos)


def test_fully_masked_additive_row_is_uniform():
    """Eager softmax over a row of finfo.min scores is uniform over all keys (finfo.min + s rounds to finfo.min):
    the kernel must not take the finite mask for an empty row. Its lse, finfo.min + log(S_kv), rounds to finfo.min;
    the gradients must still be those of the uniform row (the backward's row normalisation)."""
    s_q, s_kv = 4, 24
    q, k, v = make(1, 2, s_q, 64, FP32), make(1, 2, s_kv, 64, FP32), make(1, 2, s_kv, 64, FP32)
    allowed = torch.ones(s_q, s_kv, dtype=torch.bool, device=DEVICE)
    allowed[1] = False
    mask = additive(allowed, FP32)
    out, lse = attention_fwd(q, k, v, 0.125, mask=mask)
    assert torch.allclose(out[:, :, 1], v.mean(2), rtol=0, atol=1e-6)
    assert lse[0, 0, 1].item() == torch.finfo(FP32).min
    # eager's own spelling agrees (softmax of scores + mask in fp32)
    eager = torch.softmax(q @ k.transpose(-1, -2) * 0.125 + mask, dim=-1) @ v
    torch.testing.assert_close(out, eager, rtol=1e-5, atol=1e-6)
    g = torch.randn_like(out)
    dq, dk, dv, _ = attention_bwd(g, q, k, v, out, lse, 0.125, mask=mask)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    eager = torch.softmax(leaves[0] @ leaves[1].transpose(-1, -2) * 0.125 + mask, dim=-1) @ leaves[2]
    for a, b in zip((dq, dk, dv), torch.autograd.grad(eager, leaves, g)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_configs_agree_and_deterministic():
    """Other tile shapes (several row blocks per program group, 32-key tiles, a dK/dV tile of 16 keys looping over
    16-row blocks) give the defaults' results up to fp32 summation order; the backward is bit-for-bit repeatable."""
    q, k, v, kw = build("window-gqa2-d64-bf16")
    scale = kw.pop("scale")
    q, k, v = q.float(), k.float(), v.float()
    results = []
    for fwd_cfg, bwd_cfg in ((None, None), ((16, 32, 4, 1), ((16, 32, 4, 1), (16, 16, 4, 1))),
                             ((16, 32, 4, 1), ((16, 32, 4, 1), (16, 16, 4, 1)))):
        out, lse = attention_fwd(q, k, v, scale, config=fwd_cfg, **kw)
        grads = attention_bwd(out, q, k, v, out, lse, scale, config=bwd_cfg, **kw)[:3]
        results.append((out, lse, *grads))
    for a, b in zip(*results[:2]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert all(torch.equal(a, b) for a, b in zip(results[1], results[2]))


def test_empty():
    for batch, s_q, s_kv in ((0, 4, 4), (1, 0, 4), (1, 3, 0)):
        q, k, v = make(batch, 4, s_q, 64, BF16), make(batch, 2, s_kv, 64, BF16), make(batch, 2, s_kv, 64, BF16)
        sinks = torch.randn(4, device=DEVICE)
        out, lse = attention_fwd(q, k, v, 0.125, causal=True, sinks=sinks)
        assert out.shape == q.shape and lse.shape == q.shape[:3]
        if s_kv == 0 and s_q > 0:  # nothing but the sink: out 0, lse = the sink (to 3 fp32 ulp: the kernel keeps
            # its statistics in log2 units, sink * log2(e) * ln(2) rounds twice)
            assert (out == 0).all()
            torch.testing.assert_close(lse, sinks[None, :, None].expand_as(lse), rtol=3 * 2.0 ** -23, atol=0)
        dq, dk, dv, dsinks = attention_bwd(torch.ones_like(out), q, k, v, out, lse, 0.125, causal=True, sinks=sinks)
        assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape and dsinks.shape == (4,)
        assert (dq == 0).all() and (dsinks == 0).all()  # delta = dO . O = 0 on sink-only rows


_COMPILE_BODY = r"""
import torch
from mojo_compile.kernels import attention as A

STATS = {"LSE", "DELTA", "RNORM", "PSINK", "SINKS"}
FLOATS = {"scale", "softcap"}
NOT_DIV16 = {"window", "S_q", "S_kv"}  # what a launch leaves unspecialised; strides and pointers: multiples of 16


def compile_attention(fn, mask_dtype, consts, num_warps, num_stages):
    names = fn.arg_names
    pointers = {n: "fp32" if n in STATS else "i32" if n in ("QPOS", "KRANGE") else mask_dtype if n == "MASK" else "bf16"
                for n in names if n.isupper()}
    compile_kernel(fn, dict(consts, smk=1), pointers, FLOATS, set(names) - FLOATS - NOT_DIV16, num_warps,
                   num_stages)  # a launch with a unit mask stride makes it a constant


for d, flags, mask_dtype in ((80, dict(HAS_WINDOW=True, HAS_SOFTCAP=True, HAS_QPOS=True, MASK_KIND=2, HAS_SINKS=True),
                              "bf16"),
                             (128, dict(HAS_WINDOW=False, HAS_SOFTCAP=False, HAS_QPOS=False, MASK_KIND=1,
                                        HAS_SINKS=False), "u8"),
                             (128, dict(HAS_WINDOW=False, HAS_SOFTCAP=False, HAS_QPOS=False, MASK_KIND=3,
                                        HAS_SINKS=False), "u8"),
                             (128, dict(HAS_WINDOW=False, HAS_SOFTCAP=False, HAS_QPOS=False, MASK_KIND=4,
                                        HAS_SINKS=False), "u8")):
    base = dict(HQ=32, HKV=8, D=d, CAUSAL=True, BLOCK_D=triton.next_power_of_2(d), INTERPRET=False,
                DOT_PRECISION="tf32", PERSISTENT=False, **flags)
    for kind, fn in (("fwd", A._fwd_kernel), ("dq", A._bwd_dq_kernel), ("dkdv", A._bwd_dkdv_kernel)):
        bm, bn, warps, stages = A._config(kind, 4096, d, torch.bfloat16, heavy=flags["MASK_KIND"] < 3)
        compile_attention(fn, mask_dtype, dict(base, BLOCK_M=bm, BLOCK_N=bn), warps, stages)
"""


def test_compiles_for_hopper():
    """The three kernels compile for sm_90 (tests/hopper.py) in their heaviest variants: every feature, D = 80;
    bool mask, D = 128; and the key-padding masks (range only; with holes) with the plain case's tiles."""
    compile_for_hopper(_COMPILE_BODY, 12)
