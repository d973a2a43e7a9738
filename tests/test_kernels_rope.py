"""The Triton RoPE and fused QK-norm + RoPE kernels (kernels/rope.py) against an independent fp64 reference (forward
and backward), and against the eager HF spellings, whose roundings the forwards reproduce bit for bit. On CPU they
run under TRITON_INTERPRET=1 (see conftest.py)."""
import dataclasses
import itertools

import pytest
import torch
# conftest sets TRITON_INTERPRET=1 before the kernels are defined
from conftest import DEVICE, KERNEL_TARGET_OK, interpreter_loops_from_a_program_id, rel
from hopper import compile_for_hopper

from mojo_compile.kernels import launch_cases
from mojo_compile.kernels.common import record_launches
from mojo_compile.kernels.rope import qk_norm_rope_bwd, qk_norm_rope_fwd, rope_bwd, rope_fwd
from mojo_compile.lowering.devices import DEVICES, assume

pytestmark = pytest.mark.skipif(not KERNEL_TARGET_OK, reason="needs CUDA or TRITON_INTERPRET=1")

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
U = {BF16: 2.0 ** -8, FP16: 2.0 ** -11, FP32: 2.0 ** -24}  # unit roundoff

# Normwise relative error bounds against fp64, from the roundings each computation performs (u of the output dtype):
# rope forward rounds two products and their sum, |err| <= u(|x*c| + |x'*s| + |y|), whose norm is <= (1 + sqrt 2) u
# ||y|| since ||x*c||^2 + ||x'*s||^2 ~ ||y||^2. The backwards compute in fp32 and round once: u, plus fp32 slack.
FWD_TOL = 1 + 2 ** 0.5
BWD_SLACK = 8 * U[FP32]
# Eager autograd of the spelling rounds like the forward (three roundings) and once more when casting the grad back
# to a narrower q; ours rounds once: the two differ by at most the sum.
EAGER_BWD_TOL = 2 + 2 ** 0.5


def bshd(t, seq_dim):
    return t if seq_dim == 1 else t.transpose(1, 2)


# ---------------------------------------------------------------------------------------------------------- inputs
def make_qk(batch, seq, hq, hk, d, dtype, layout):
    """q and k as BSHD, BHSD (a transposed view of BSHD storage, as HF makes it) or BSHD slices of one packed qkv
    projection (strided rows). Returns (q, k, seq_dim)."""
    if layout == "packed":
        qkv = torch.randn(batch, seq, (hq + 2 * hk) * d, device=DEVICE, dtype=dtype)
        q = qkv[..., : hq * d].view(batch, seq, hq, d)
        k = qkv[..., hq * d: (hq + hk) * d].view(batch, seq, hk, d)
        return q, k, 1
    q = torch.randn(batch, seq, hq, d, device=DEVICE, dtype=dtype)
    k = torch.randn(batch, seq, hk, d, device=DEVICE, dtype=dtype)
    return (q, k, 1) if layout == "bshd" else (q.transpose(1, 2), k.transpose(1, 2), 2)


def make_cos_sin(batch, seq, r, dtype, form):
    """cos/sin of random positions (different per batch row) and r independent frequencies: no duplicated halves or
    pairs, so a kernel that assumed them would fail. Forms: [B, S, R], [S, R], [1, S, R] expanded over the batch,
    and [B, S, R] with a column stride of 2."""
    pos = torch.randint(0, 4096, (batch, seq), device=DEVICE).double()
    ang = pos[..., None] * 10000.0 ** -torch.rand(r, device=DEVICE, dtype=torch.float64)
    cos, sin = ang.cos().to(dtype), ang.sin().to(dtype)
    if form == "sr":
        return cos[0], sin[0]
    if form == "expanded":
        return cos[:1].expand(batch, seq, r), sin[:1].expand(batch, seq, r)
    if form == "strided":
        return (torch.stack((cos, torch.randn_like(cos)), -1).flatten(-2)[..., ::2],
                torch.stack((sin, torch.randn_like(sin)), -1).flatten(-2)[..., ::2])
    return cos, sin


# ------------------------------------------------------------------------------------------------------ references
def rope64(x, cos, sin, r, interleaved, rotate_last, seq_dim):
    """The definition in fp64: out[i] = x[i]*c[i] + sign[i]*x[partner[i]]*s[i] on the rotated slice, where the
    partner of i is i +- r/2 (sign - on the first half) or i ^ 1 (sign - on even i)."""
    x = bshd(x.double(), seq_dim)
    c, s = ((t if t.dim() == 3 else t[None]).double()[:, :, None, :] for t in (cos, sin))
    i = torch.arange(r, device=x.device)
    if interleaved:
        partner, sign = i ^ 1, torch.where(i % 2 == 0, -1.0, 1.0)
    else:
        partner, sign = (i + r // 2) % r, torch.where(i < r // 2, -1.0, 1.0)
    start = x.shape[-1] - r if rotate_last else 0
    xr = x[..., start: start + r]
    out = torch.cat([x[..., :start], xr * c + sign.double() * xr[..., partner] * s, x[..., start + r:]], dim=-1)
    return bshd(out, seq_dim)


def rotate_half(x):  # HF R1 (Llama)
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotate_half_interleaved(x):  # HF R4 (Cohere, GLM)
    x1 = x[..., 0::2]
    x2 = x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def eager_rope(x, cos, sin, r, interleaved, rotate_last, seq_dim):
    """The HF spelling, computed by torch in x's dtype promoted with cos's: `x * cos + rotate_half(x) * sin` on the
    rotated slice (R1/R2; R4's stack/flatten rotate when interleaved), cos unsqueezed at the head dim."""
    cos, sin = ((t if t.dim() == 3 else t[None]).unsqueeze(3 - seq_dim) for t in (cos, sin))
    start = x.shape[-1] - r if rotate_last else 0
    x_rot = x[..., start: start + r]
    rot = x_rot * cos + (rotate_half_interleaved if interleaved else rotate_half)(x_rot) * sin
    return torch.cat([x[..., :start], rot, x[..., start + r:]], dim=-1)


# --------------------------------------------------------------------------------------------------------- rope
HEADS = [(4, 2), (3, 1), (8, 8), (6, 2)]  # GQA, non-power-of-2 and MHA head counts
FORMS = ["bsr", "sr", "expanded", "strided"]
DTYPES = [(BF16, BF16), (BF16, FP32), (FP32, FP32), (FP16, FP16)]  # (q, cos)
# Every head dim x rotary fraction x convention x layout; heads, cos form, dtypes and rotate_last cycle through.
FWD_CASES = [(d, frac, inter, layout, HEADS[i % 4], FORMS[(i // 3) % 4], DTYPES[(i // 2) % 4], i % 5 == 0)
             for i, (d, frac, inter, layout) in enumerate(
                 itertools.product([64, 80, 96, 128], [0.25, 0.5, 1.0], [False, True], ["bhsd", "bshd", "packed"]))]


def _case_id(c):
    d, frac, inter, layout, (hq, hk), form, (qd, cd), last = c
    return (f"d{d}-r{frac}-{'inter' if inter else 'half'}-{layout}-h{hq}x{hk}-{form}-{str(qd)[6:]}_{str(cd)[6:]}"
            + ("-last" if last else ""))


@pytest.mark.parametrize("d,frac,interleaved,layout,heads,form,dtypes,rotate_last", FWD_CASES,
                         ids=[_case_id(c) for c in FWD_CASES])
def test_rope_forward(d, frac, interleaved, layout, heads, form, dtypes, rotate_last):
    check_rope_forward(2, 5, d, int(d * frac), interleaved, layout, heads, form, dtypes, rotate_last)


def check_rope_forward(batch, seq, d, r, interleaved, layout, heads, form, dtypes, rotate_last):
    """rope_fwd against fp64 (FWD_TOL) and, bit for bit, against the eager spelling; inputs left untouched."""
    q, k, seq_dim = make_qk(batch, seq, heads[0], heads[1], d, dtypes[0], layout)
    cos, sin = make_cos_sin(batch, seq, r, dtypes[1], form)
    before = [t.clone() for t in (q, k, cos, sin)]
    q_out, k_out = rope_fwd(q, k, cos, sin, r, interleaved, seq_dim, rotate_last=rotate_last)
    assert all(torch.equal(a, b) for a, b in zip(before, (q, k, cos, sin)))  # inputs untouched
    out_dtype = torch.promote_types(*dtypes)
    for x, out in ((q, q_out), (k, k_out)):
        assert out.dtype == out_dtype and out.shape == x.shape and out.is_contiguous()
        ref = rope64(x, cos, sin, r, interleaved, rotate_last, seq_dim)
        assert rel(out, ref) <= FWD_TOL * U[out_dtype], rel(out, ref)
        # The same roundings as the eager spelling (products, then the sum, in the output dtype): bit for bit.
        assert torch.equal(out, eager_rope(x, cos, sin, r, interleaved, rotate_last, seq_dim))


@pytest.mark.parametrize("spelling", ["olmo", "cohere"])
def test_rope_forward_fp32_then_cast(spelling):
    """OLMo: bf16 q, fp32 cos, `(q * cos + rotate_half(q) * sin).to(q.dtype)`. Cohere (interleaved): `q.float()`
    with bf16 cos, the same cast at the end -- rope_fwd with cos cast to fp32 and out_dtype=bf16."""
    interleaved = spelling == "cohere"
    q, k, seq_dim = make_qk(2, 6, 4, 2, 64, BF16, "bhsd")
    cos, sin = make_cos_sin(2, 6, 64, FP32 if spelling == "olmo" else BF16, "bsr")
    q_out, k_out = rope_fwd(q, k, cos.float(), sin.float(), 64, interleaved, seq_dim, out_dtype=BF16)
    for x, out in ((q, q_out), (k, k_out)):
        assert out.dtype == BF16
        x_eager = x.float() if spelling == "cohere" else x
        assert torch.equal(out, eager_rope(x_eager, cos, sin, 64, interleaved, False, seq_dim).to(BF16))


BWD_CASES = [(d, inter, layout, HEADS[i % 4], [0.25, 0.5, 1.0][i % 3], FORMS[i % 4], DTYPES[i % 3], i % 4 == 1)
             for i, (d, inter, layout) in enumerate(
                 itertools.product([64, 80, 96, 128], [False, True], ["bhsd", "bshd"]))]


@pytest.mark.parametrize("d,interleaved,layout,heads,frac,form,dtypes,rotate_last", BWD_CASES,
                         ids=[_case_id((c[0], c[4], c[1], c[2], c[3], c[5], c[6], c[7])) for c in BWD_CASES])
def test_rope_backward(d, interleaved, layout, heads, frac, form, dtypes, rotate_last):
    check_rope_backward(2, 5, d, int(d * frac), interleaved, layout, heads, form, dtypes, rotate_last)


def check_rope_backward(batch, seq, d, r, interleaved, layout, heads, form, dtypes, rotate_last):
    """rope_bwd against autograd of the fp64 definition and of the eager spelling."""
    q, k, seq_dim = make_qk(batch, seq, heads[0], heads[1], d, dtypes[0], layout)
    cos, sin = make_cos_sin(batch, seq, r, dtypes[1], form)
    out_dtype = torch.promote_types(*dtypes)
    # Gradients stored in the other layout than q/k's: strides differ from the inputs'.
    gq, gk = (torch.randn(x.transpose(1, 2).shape, device=DEVICE, dtype=out_dtype).transpose(1, 2) for x in (q, k))
    dq, dk = rope_bwd(gq, gk, cos, sin, r, interleaved, seq_dim, rotate_last=rotate_last, dtype=dtypes[0])
    leaves64 = [t.detach().double().requires_grad_() for t in (q, k)]
    outs64 = [rope64(x, cos, sin, r, interleaved, rotate_last, seq_dim) for x in leaves64]
    leaves = [t.detach().requires_grad_() for t in (q, k)]
    outs = [eager_rope(x, cos, sin, r, interleaved, rotate_last, seq_dim) for x in leaves]
    for g, g64, g_eager in zip((dq, dk), torch.autograd.grad(outs64, leaves64, (gq.double(), gk.double())),
                               torch.autograd.grad(outs, leaves, (gq, gk))):
        assert g.dtype == dtypes[0] and g.shape == g64.shape and g.is_contiguous()
        assert rel(g, g64) <= U[dtypes[0]] + BWD_SLACK, rel(g, g64)
        assert rel(g, g_eager) <= EAGER_BWD_TOL * U[dtypes[0]], rel(g, g_eager)


# ------------------------------------------------------------------------------------------------- qk-norm + rope
def eager_norm(x, w, eps, style, rstd=None):
    """The HF norms on [B, S, H, D] (OLMo2's over the token's H*D), optionally with a given rstd instead of
    torch's, to check every rounding after it bit for bit."""
    x_in = x.flatten(2) if style == "olmo2" else x
    x32 = x_in.float()
    rstd = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) if rstd is None else rstd[..., None]
    hs = x32 * rstd
    if style == "olmo2":  # `(self.weight * hidden_states).to(input_dtype)`
        y = (w * hs).to(x.dtype)
    elif style == "gemma3":  # `(output * (1.0 + self.weight.float())).type_as(x)`
        y = (hs * (1.0 + w.float())).type_as(x)
    else:  # Qwen3 (Llama): `self.weight * hidden_states.to(input_dtype)`
        y = w * hs.to(x.dtype)
    return y.view(x.shape)


def norm64(x, w, eps, style):
    x64 = (x.flatten(2) if style == "olmo2" else x).double()
    y = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * (w.double() + (1.0 if style == "gemma3" else 0.0))
    return y.view(x.shape)


# style: (cast, weight_offset, heads together, weight dtype, cos dtype, out_dtype)
STYLES = {
    "qwen3": ("normed", 0.0, False, BF16, BF16, None),
    "qwen3_fp32w": ("normed", 0.0, False, FP32, BF16, None),  # fp32 weight: the norm's output promotes to fp32
    "gemma3": ("output", 1.0, False, BF16, BF16, None),
    "olmo2": ("output", 0.0, True, BF16, FP32, BF16),  # fp32 cos, rope computed in fp32, `.to(q_type)`
}
QK_CASES = [(style, *shape) for style, shape in itertools.product(STYLES, [
                (128, "bshd", False, 1.0, (4, 2)), (64, "bhsd", True, 0.5, (3, 1)), (80, "bhsd", False, 0.25, (6, 2)),
                (96, "bshd", True, 1.0, (2, 2))])]


@pytest.mark.parametrize("style,d,layout,interleaved,frac,heads", QK_CASES,
                         ids=[f"{s}-d{d}-{lay}-{'inter' if i else 'half'}-r{f}-h{h[0]}x{h[1]}"
                              for s, d, lay, i, f, h in QK_CASES])
def test_qk_norm_rope(style, d, layout, interleaved, frac, heads):
    """Qwen3 (q_norm on [B, S, H, D] per head, transpose, rope), Gemma3 (1 + w, fp32 weight multiply) and OLMo2
    (norm over H*D, fp32 cos): forward and backward against eager and fp64."""
    check_qk_norm_rope(2, 4, style, d, layout, interleaved, int(d * frac), heads, False)


def check_qk_norm_rope(batch, seq, style, d, layout, interleaved, r, heads, rotate_last):
    """qk_norm_rope_fwd / _bwd in a model's style (STYLES) against eager (bit for bit after the rstd) and fp64."""
    cast, offset, together, w_dtype, cos_dtype, out_dtype = STYLES[style]
    eps = 1e-6
    hq, hk = heads
    q, k, seq_dim = make_qk(batch, seq, hq, hk, d, BF16, layout)
    cos, sin = make_cos_sin(batch, seq, r, cos_dtype, "bsr")
    wq, wk = ((1 + 0.5 * torch.randn(h * d if together else d, device=DEVICE)).to(w_dtype) for h in (hq, hk))
    before = [t.clone() for t in (q, k, wq, wk, cos, sin)]
    q_out, k_out, rq, rk = qk_norm_rope_fwd(q, k, wq, wk, eps, cast, cos, sin, r, interleaved, seq_dim,
                                            norm_heads_together=together, rotate_last=rotate_last,
                                            weight_offset=offset, out_dtype=out_dtype)
    assert all(torch.equal(a, b) for a, b in zip(before, (q, k, wq, wk, cos, sin)))

    def eager(x, w, rstd=None):  # norm on [B, S, H, D], then the rope on HF's [B, H, S, D]
        y = eager_rope(eager_norm(bshd(x, seq_dim), w, eps, style, rstd).transpose(1, 2), cos, sin, r, interleaved,
                       rotate_last, 2)
        return bshd(y.transpose(1, 2), seq_dim).to(out_dtype or y.dtype)

    def exact(x, w):
        return rope64(bshd(norm64(bshd(x, seq_dim), w, eps, style), seq_dim), cos, sin, r, interleaved, rotate_last,
                      seq_dim)

    for x, w, out, rstd in ((q, wq, q_out, rq), (k, wk, k_out, rk)):
        x64 = bshd(x, seq_dim).double()
        x64 = x64.flatten(2) if together else x64
        torch.testing.assert_close(rstd.double(), torch.rsqrt(x64.pow(2).mean(-1) + eps), rtol=4 * U[FP32], atol=0)
        assert out.shape == x.shape and out.is_contiguous() and out.dtype == eager(x, w).dtype
        # Every rounding after the rstd is the eager spelling's, bit for bit ...
        assert torch.equal(out, eager(x, w, rstd))
        # ... and torch's own rstd differs at most in its last bit (sum order), which moves an element by an ulp.
        assert rel(out, eager(x, w)) <= U[BF16], rel(out, eager(x, w))
        # Two roundings in the norm, the rope's (1 + sqrt 2), all at most bf16's.
        assert rel(out, exact(x, w)) <= (2 + FWD_TOL) * U[BF16], rel(out, exact(x, w))

    # Backward: one fused launch, against fp64 and against eager autograd (which rounds to bf16 at every step).
    gq, gk = torch.randn_like(q_out), torch.randn_like(k_out)
    grads = qk_norm_rope_bwd(gq, gk, q, k, wq, wk, rq, rk, cast, cos, sin, r, interleaved, seq_dim,
                             norm_heads_together=together, rotate_last=rotate_last, weight_offset=offset)
    leaves64 = [t.detach().double().requires_grad_() for t in (q, k, wq, wk)]
    grads64 = torch.autograd.grad([exact(leaves64[0], leaves64[2]), exact(leaves64[1], leaves64[3])], leaves64,
                                  (gq.double(), gk.double()))
    leaves = [t.detach().requires_grad_() for t in (q, k, wq, wk)]
    grads_eager = torch.autograd.grad([eager(leaves[0], leaves[2]), eager(leaves[1], leaves[3])], leaves, (gq, gk))
    for name, g, g64, g_eager, leaf in zip(["q", "k", "wq", "wk"], grads, grads64, grads_eager, (q, k, wq, wk)):
        assert g.dtype == leaf.dtype and g.shape == leaf.shape
        # fp32 math and one rounding to the grad's dtype; the weight grad sums the bf16-rounded normalised value
        # that the "normed" weight multiply sees (rms_norm_bwd does the same): one bf16 u more.
        assert rel(g, g64) <= 2 * U[BF16] + BWD_SLACK, (name, rel(g, g64))
        # Eager rounds in bf16 through the rope backward (three roundings), the weight multiply's backward and the
        # casts around the fp32 norm backward; ours once.
        assert rel(g, g_eager) <= (3 + EAGER_BWD_TOL) * U[BF16], (name, rel(g, g_eager))
    # The weight grads are exactly the sum the op defines -- the rope's transpose of the output grad times the
    # normalised value the weight multiplied (bf16-rounded in "normed" mode) -- up to fp32 summation order and the
    # final rounding to the weight's dtype (an fp32 weight pins down the rounding of the normalised value).
    for x, w, rstd, g_out, dw in ((q, wq, rq, gq, grads[2]), (k, wk, rk, gk, grads[3])):
        x_in = bshd(x, seq_dim).flatten(2) if together else bshd(x, seq_dim)
        n = x_in.float() * rstd[..., None]
        n_seen = (n.to(BF16) if cast == "normed" else n).double()
        w64 = w.detach().double().requires_grad_()
        y = bshd((n_seen * (w64 + offset)).view(bshd(x, seq_dim).shape), seq_dim)
        (dw64,) = torch.autograd.grad(rope64(y, cos, sin, r, interleaved, rotate_last, seq_dim), w64,
                                      g_out.double())
        assert rel(dw, dw64) <= U[w.dtype] + 1e-5, rel(dw, dw64)


# ------------------------------------------------------------------------------------------------------ pair tiles
# Where per-element addresses are scalar loads (Ascend: DeviceCaps.vector_gathers False) every layout runs the
# PAIR_TILES kernels: the rotation partners as two affine tiles (the halves, or the even and the odd columns) and the
# columns that do not rotate as a third. The checks above, planned for such a device: one tile a program (as the
# interpreter plans), and persistent on 3 cores (as Ascend plans: each program loops over token blocks).
PAIR_TILES_DEVICES = {
    "one_tile_a_program": dataclasses.replace(DEVICES["interpreter"], name="pair-tiles stand-in",
                                              vector_gathers=False),
    "persistent": dataclasses.replace(DEVICES["interpreter"], name="persistent pair-tiles stand-in",
                                      vector_gathers=False, persistent=True, vector_cores=3),
}


@pytest.fixture(params=list(PAIR_TILES_DEVICES))
def pair_tiles(request):
    """Every launch in the test planned for a device without vector gathers (see PAIR_TILES_DEVICES)."""
    if request.param == "persistent" and not interpreter_loops_from_a_program_id():
        pytest.skip("this Triton's interpreter cannot loop from a program id (the persistent kernels' loop)")
    with assume(PAIR_TILES_DEVICES[request.param]) as caps:
        yield caps


# (batch, seq, d, r, interleaved, layout, heads, cos form, (q, cos) dtypes, rotate_last): interleaved and halves,
# over the whole head and partial (rotating the first or the last dims), odd head dims (20, 36: pair and
# pass-through blocks wider than their columns) and head counts.
PAIR_TILE_CASES = [
    (2, 5, 64, 64, True, "bhsd", (4, 2), "bsr", (BF16, BF16), False),
    (3, 7, 80, 40, True, "packed", (3, 1), "strided", (BF16, FP32), True),
    (2, 5, 96, 24, False, "bshd", (6, 2), "expanded", (FP32, FP32), False),
    (3, 5, 20, 12, False, "bhsd", (5, 3), "sr", (FP16, FP16), True),
    (2, 3, 36, 36, True, "bshd", (3, 3), "bsr", (BF16, BF16), False),
    (2, 5, 64, 64, False, "bhsd", (4, 2), "bsr", (BF16, FP32), False),
]
PAIR_TILE_IDS = [f"b{b}-s{s}-d{d}-r{r}-{'inter' if i else 'half'}{'-last' if last else ''}-{lay}-h{h[0]}x{h[1]}"
                 for b, s, d, r, i, lay, h, _, _, last in PAIR_TILE_CASES]


@pytest.mark.parametrize("case", PAIR_TILE_CASES, ids=PAIR_TILE_IDS)
def test_rope_forward_pair_tiles(pair_tiles, case):
    check_rope_forward(*case)


@pytest.mark.parametrize("case", PAIR_TILE_CASES, ids=PAIR_TILE_IDS)
def test_rope_backward_pair_tiles(pair_tiles, case):
    check_rope_backward(*case)


# (batch, seq, style, d, layout, interleaved, r, heads, rotate_last): per head (Qwen3, Gemma3) and over all heads
# (OLMo2); interleaved, halves, partial before and after the columns that do not rotate, an odd head dim.
QK_PAIR_TILE_CASES = [
    (2, 4, "qwen3", 128, "bshd", True, 128, (4, 2), False),
    (3, 5, "olmo2", 80, "bhsd", False, 40, (3, 1), True),
    (2, 3, "gemma3", 36, "bhsd", True, 20, (5, 3), False),
    (2, 4, "qwen3_fp32w", 64, "bshd", False, 64, (4, 2), False),
    (3, 3, "olmo2", 96, "bshd", True, 96, (6, 2), False),
    (2, 3, "qwen3", 80, "bhsd", False, 20, (3, 1), True),
]


@pytest.mark.parametrize("case", QK_PAIR_TILE_CASES,
                         ids=[f"{st}-b{b}-s{s}-d{d}-r{r}-{'inter' if i else 'half'}{'-last' if last else ''}-{lay}"
                              for b, s, st, d, lay, i, r, _, last in QK_PAIR_TILE_CASES])
def test_qk_norm_rope_pair_tiles(pair_tiles, case):
    check_qk_norm_rope(*case)


def test_where_pair_tiles_are_planned():
    """Planned for Ascend every RoPE and qk-norm + RoPE launch of the model cases takes PAIR_TILES; for the H200 only
    rotate-half over the whole head does, in the forwards (the launches NVIDIA always made so)."""
    for device in ("Ascend910B3", "H200"):
        with assume(device):
            for case, call in launch_cases.cases("meta"):
                if "rope" not in case:
                    continue
                with record_launches() as launches:
                    call()
                (_, _, args), = launches
                layout = case.split()[-1] if case.startswith("rope_") else case.split()[-2]  # qk: "together=..."
                whole_head_halves = layout == "rotate-half" and not case.startswith("qk_norm_rope_bwd")
                assert args["PAIR_TILES"] == (device != "H200" or whole_head_halves), (device, case)
                if args["PAIR_TILES"]:  # the model cases' pair and pass-through widths are powers of 2
                    d, r = args["D"], args["R"]
                    assert (args["BLOCK_D"], args["BLOCK_PASS"]) == (r // 2, max(d - r, 1)), case


# ------------------------------------------------------------------------------------------------ launch configs
def test_configs_agree():
    """Small tiles (several head chunks, one token per block, several token blocks per backward program: the shape
    of a GPU launch) give the interpreter defaults' results. RoPE is elementwise: bit for bit. The norm's sums
    (sum of squares, the backward's dot, the weight grad's partials) may be ordered differently by another tile
    shape on a GPU: rstd within a few fp32 ulps, so rare elements move by a bf16 ulp."""
    q, k, seq_dim = make_qk(2, 3, 6, 3, 80, BF16, "bhsd")  # few tokens: one program each costs in the interpreter
    cos, sin = make_cos_sin(2, 3, 40, BF16, "bsr")
    for config in (None, (1, 2, 4)):
        outs = rope_fwd(q, k, cos, sin, 40, False, seq_dim, config=config)
        outs += rope_bwd(*outs, cos, sin, 40, False, seq_dim, config=config)
        if config is None:
            ref = outs
    assert all(torch.equal(a, b) for a, b in zip(ref, outs))
    wq, wk = torch.randn(80, device=DEVICE, dtype=BF16), torch.randn(80, device=DEVICE, dtype=BF16)
    results = []
    for fwd_config, bwd_config in ((None, None), ((2, 2, 4), (1, 2, 4, 3)), ((2, 2, 4), (1, 2, 4, 3))):
        q_out, k_out, rq, rk = qk_norm_rope_fwd(q, k, wq, wk, 1e-6, "normed", cos, sin, 40, True, seq_dim,
                                                config=fwd_config)
        grads = qk_norm_rope_bwd(q_out, k_out, q, k, wq, wk, rq, rk, "normed", cos, sin, 40, True, seq_dim,
                                 config=bwd_config)
        results.append((q_out, k_out, rq, rk, *grads))
    for i, (a, b) in enumerate(zip(*results[:2])):
        if a.dtype == FP32:  # rstd
            torch.testing.assert_close(a, b, rtol=4 * U[FP32], atol=0)
        else:
            assert rel(a, b) <= U[BF16], (i, rel(a, b))
    assert all(torch.equal(a, b) for a, b in zip(results[1], results[2]))  # deterministic


def test_halves_kernels_equal_general():
    """Rotate-half over the whole head runs the PAIR_TILES kernels (each half loaded once); a 4-field config forces
    the general kernel (partner loaded again). Both spell eager's roundings: bit for bit, also the rstd when its
    squares are summed over one tile of the head (the general kernel) or two (the halves) -- the interpreter sums in
    fp32 either way; on a GPU the order may differ, as in test_configs_agree."""
    q, k, seq_dim = make_qk(2, 3, 5, 2, 64, BF16, "bshd")
    cos, sin = make_cos_sin(2, 3, 64, BF16, "sr")
    wq, wk = (torch.randn(64, device=DEVICE, dtype=BF16) for _ in range(2))
    for cfg in ((1, 4, 4), (1, 4, 4, False)):
        got = rope_fwd(q, k, cos, sin, 64, False, seq_dim, config=cfg)
        got += rope_bwd(*got, cos, sin, 64, False, seq_dim, config=cfg)
        got += qk_norm_rope_fwd(q, k, wq, wk, 1e-6, "normed", cos, sin, 64, False, seq_dim, config=cfg)[:2]
        if len(cfg) == 3:
            halves = got
    assert all(torch.equal(a, b) for a, b in zip(halves, got))


def test_empty():
    for batch, seq in ((0, 4), (2, 0)):
        q, k, seq_dim = make_qk(batch, seq, 4, 2, 64, BF16, "bhsd")
        cos, sin = make_cos_sin(max(batch, 1), seq, 64, BF16, "bsr")
        cos, sin = cos[:batch], sin[:batch]
        q_out, k_out = rope_fwd(q, k, cos, sin, 64, False, seq_dim)
        dq, dk = rope_bwd(q_out, k_out, cos, sin, 64, False, seq_dim)
        assert q_out.shape == dq.shape == q.shape and k_out.shape == dk.shape == k.shape
        w = torch.randn(64, device=DEVICE, dtype=BF16)
        q_out, k_out, rq, rk = qk_norm_rope_fwd(q, k, w, w, 1e-6, "normed", cos, sin, 64, False, seq_dim)
        assert q_out.shape == q.shape and rq.shape == (batch, seq, 4) and rk.shape == (batch, seq, 2)
        dq, dk, dwq, dwk = qk_norm_rope_bwd(q_out, k_out, q, k, w, w, rq, rk, "normed", cos, sin, 64, False, seq_dim)
        assert dq.shape == q.shape and dk.shape == k.shape
        assert torch.equal(dwq, torch.zeros_like(w)) and torch.equal(dwk, torch.zeros_like(w))


_COMPILE_BODY = r"""
from mojo_compile.kernels import rope as R

FP32 = {"RQ", "RK", "DWQ", "DWK"}  # rstd and weight-grad partials
INTS = {"T", "S"}


def compile_rope(fn, consts, floats=()):
    pointers = {n: "fp32" if n in FP32 else "bf16" for n in fn.arg_names if n.isupper() and n not in INTS}
    compile_kernel(fn, dict(consts, INTERPRET=False, PERSISTENT=False), pointers, floats, enable_fp_fusion=False)


qwen = dict(HQ=32, HK=8, D=128, R=128, ROT_START=0, INTERLEAVED=False, BLOCK_T=1, BLOCK_HQ=32, BLOCK_HK=8)
partial = dict(qwen, HQ=5, HK=3, D=80, R=40, ROT_START=40, INTERLEAVED=True, BLOCK_T=2, BLOCK_HQ=8, BLOCK_HK=4)
norm = dict(CAST=0, Q_NORM_FP32=False, K_NORM_FP32=True, Q_COMPUTE_FP32=False, K_COMPUTE_FP32=True)
scalars = ("eps", "weight_offset")
# (PAIR_TILES: BLOCK_D is the block of the R / 2 pairs, BLOCK_PASS that of the D - R columns that do not rotate)
for shape, pair_tiles, block_d, block_pass in ((qwen, True, 64, 1), (partial, False, 128, 1), (partial, True, 32, 64)):
    tiles = dict(PAIR_TILES=pair_tiles, BLOCK_D=block_d, BLOCK_PASS=block_pass)
    for backward in (False, True):
        compile_rope(R._rope_kernel, dict(shape, **tiles, BACKWARD=backward, COMPUTE_FP32=False))
    for together in (False, True):
        compile_rope(R._norm_rope_fwd_kernel, dict(shape, **norm, **tiles, TOGETHER=together,
                                                   BLOCK_HQ=32 if together else shape["BLOCK_HQ"]), scalars)
    compile_rope(R._norm_rope_bwd_kernel, dict(shape, **tiles, TOGETHER=False, CAST=0), scalars)
"""


def test_compiles_for_hopper():
    """The RoPE and qk-norm + RoPE kernels compile for sm_90 (tests/hopper.py): PAIR_TILES at Qwen3's shape (halves
    over the whole head) and interleaved and partial (rotating the last dims), the general kernels there too; norms
    per head and over all heads."""
    compile_for_hopper(_COMPILE_BODY, 15)


@pytest.mark.parametrize("k_shape", [(2, 2, 5, 16), (2, 2, 2, 16), (1, 2, 3, 16)], ids=["longer", "shorter", "batch"])
def test_k_of_other_positions_or_batch_than_q_falls_back(k_shape):
    """A table of one position broadcasts over q and k of any lengths, as eager's `x * cos + rotate_half(x) * sin`
    does; the kernels walk q's tokens for both, so ttx refuses k with another batch or length than q's and the
    call runs on the reference: every row of k rotated (none left unwritten), nothing written past k's end."""
    torch.manual_seed(0)
    q, k = torch.randn(2, 4, 3, 16, device=DEVICE), torch.randn(k_shape, device=DEVICE)
    angle = torch.randn(1, 1, 16, device=DEVICE)
    cos, sin = angle.cos(), angle.sin()

    def eager(x):
        x64 = x.double()
        rotated = torch.cat((-x64[..., 8:], x64[..., :8]), -1)
        return x64 * cos.double()[:, None] + rotated * sin.double()[:, None]

    q_out, k_out = torch.ops.mojo.rope(q, k, cos, sin, 16, False, 2, False, "ttx")
    assert k_out.shape == k.shape
    torch.testing.assert_close(q_out.double(), eager(q), rtol=1e-6, atol=1e-6)  # fp32: a few roundings of O(1)
    torch.testing.assert_close(k_out.double(), eager(k), rtol=1e-6, atol=1e-6)
    weight = 1 + 0.1 * torch.randn(16, device=DEVICE)
    got = torch.ops.mojo.qk_norm_rope(q, k, weight, weight, 1e-6, 0.0, "normed", cos, sin, 16, False, 2, False, "ttx")
    expected = torch.ops.mojo.qk_norm_rope(q, k, weight, weight, 1e-6, 0.0, "normed", cos, sin, 16, False, 2, False,
                                           "torch")
    for mine, reference in zip(got, expected):
        assert mine.shape == reference.shape
        torch.testing.assert_close(mine, reference)
