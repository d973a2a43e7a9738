"""The torch_npu target without an NPU. torch_npu is stood in for by a module whose ops implement their documented
semantics (docs/seed-contracts.md) in fp64, written here independently of our reference. For
npu_fused_infer_attention_score that is BNSD, GQA by num_key_value_heads, atten_mask True = masked OUT, sparse mode 3
= bottom-right causal from the compressed 2048 x 2048 mask, the row log-sum-exp, and NaN on a row with no key (the
worst a kernel could return there); for npu_rms_norm, npu_swiglu and npu_rotary_mul their formulas, one rounding, and
the table shapes npu_rotary_mul documents for each layout. So these tests check our mapping -- argument names, mask
polarity, the explicit scale, structure turned into masks, empty rows, unit gammas, table shapes -- against the torch
reference of each op."""
import logging
import sys
import types

import pytest
import torch

from mojo_compile import lowering
from mojo_compile.ops import attention, rope
from mojo_compile.ops import rms_norm as rms_norm_ops

CALLS = []


def fused_infer_attention_score(query, key, value, *, atten_mask=None, num_heads=1, scale=1.0, input_layout="BSH",
                                num_key_value_heads=0, sparse_mode=0, softmax_lse_flag=False, **unused):
    assert input_layout == "BNSD" and not unused, (input_layout, unused)
    assert all(t.is_contiguous() for t in (query, key, value)), "FIA takes no non-contiguous tensor"
    assert key.shape == value.shape, "FIA: key and value shapes must be identical"
    CALLS.append(dict(scale=scale, sparse_mode=sparse_mode, mask=atten_mask))
    batch, heads, s_q, _ = query.shape
    s_kv = key.shape[2]
    assert not (s_q == 1 and sparse_mode == 3), "FIA ignores sparse_mode for one query (its mask must be [B, Skv])"
    assert num_heads == heads and key.shape[1] == num_key_value_heads and heads % num_key_value_heads == 0
    group = heads // num_key_value_heads
    k, v = (t.double().repeat_interleave(group, 1) for t in (key, value))
    scores = query.double() @ k.transpose(-1, -2) * scale
    if sparse_mode == 3:  # rightDownCausal: query i sees keys up to i + (Skv - Sq)
        assert torch.equal(atten_mask, torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1))
        masked = torch.arange(s_kv)[None, :] > torch.arange(s_q)[:, None] + (s_kv - s_q)
    else:
        assert sparse_mode == 0
        masked = atten_mask if atten_mask is not None else torch.zeros(s_q, s_kv, dtype=torch.bool)
        assert masked.dtype == torch.bool
    scores = scores.masked_fill(masked, float("-inf"))
    lse = torch.logsumexp(scores, -1, keepdim=True)
    out = torch.exp(scores - lse) @ v  # NaN where a row has no key
    return out.to(query.dtype), (lse.float() if softmax_lse_flag else torch.empty(0))


@pytest.fixture
def npu(monkeypatch):
    """The stand-in torch_npu, in sys.modules for the test: the mappings (ops/*.py) import it when they run, the
    target's table when it loads. Removed after (monkeypatch): later imports see the real (missing) torch_npu."""
    stand_in = types.ModuleType("torch_npu")
    stand_in.npu_fused_infer_attention_score = fused_infer_attention_score
    monkeypatch.setitem(sys.modules, "torch_npu", stand_in)
    CALLS.clear()
    yield stand_in


def test_the_target_loads_where_torch_npu_imports(npu):
    """With torch_npu importable the target's table loads, holding the mappings the ops' modules registered."""
    loader = lowering._LOADERS["torch_npu"]
    lowering.register_target("torch_npu", loader)  # forget the table's state without torch_npu
    try:
        assert lowering.unavailable("torch_npu") is None
        assert set(lowering._table("torch_npu")) == {
            "rms_norm", "add_rms_norm", "gated_act_fused", "rope", "attention", "layer_norm", "add_layer_norm",
            "cross_entropy", "cross_entropy_backward", "linear_cross_entropy", "linear_cross_entropy_backward"}
    finally:
        lowering.register_target("torch_npu", loader)  # loaded again without the stand-in: unavailable


def qkv(s_q, s_kv, batch=2, heads=4, kv_heads=2, d=16, dtype=torch.float32):
    q = torch.randn(batch, heads, s_q, d, dtype=dtype)
    return (q, *(torch.randn(batch, kv_heads, s_kv, d, dtype=dtype) for _ in range(2)))


CASES = {  # name: (s_q, s_kv, mask_of(batch, s_q, s_kv) or None, q_pos, causal, window, sparse mode expected)
    "causal": (6, 6, None, None, True, 0, 3),
    "causal_decode": (1, 9, None, None, True, 0, None),  # bottom-right: the one query sees every key
    "causal_chunk": (3, 9, None, None, True, 0, 3),
    "causal_more_queries": (5, 3, None, None, True, 0, 0),  # bottom-right: the first two rows keep no key
    "full": (5, 7, None, None, False, 0, None),
    "positions": (1, 9, None, [4], True, 0, 0),  # a static cache filled up to position 4
    "window": (7, 7, None, None, True, 3, 0),
    "mask": (5, 7, lambda b, sq, skv: torch.rand(b, 1, sq, skv) > 0.3, None, False, 0, 0),
    "mask_and_causal": (5, 7, lambda b, sq, skv: torch.rand(sq, skv) > 0.3, None, True, 0, 0),
    # what the mask analysis gives for HF's causal + padding: a [B, 1, 1, S] key mask with causal
    "key_padding_and_causal": (6, 6, lambda b, sq, skv: torch.rand(b, 1, 1, skv) > 0.3, None, True, 0, 0),
}


@pytest.mark.parametrize("case", list(CASES))
def test_attention_matches_the_reference(npu, case):
    s_q, s_kv, make_mask, q_pos, causal, window, mode = CASES[case]
    q, k, v = qkv(s_q, s_kv)
    mask = make_mask(2, s_q, s_kv) if make_mask else None
    if mask is not None:
        if mask.shape[-2] > 1:
            mask[..., 1, :] = False  # a query row with no key at all
        else:
            mask[-1] = False  # a batch row with no key at all
    before = None if mask is None else mask.clone()
    positions = torch.tensor(q_pos) if q_pos else None
    args = (q, k, v, mask, positions, 0.3, causal, window, 0.0, None)
    out, lse = attention.npu_forward(*args)
    ref_out, ref_lse = attention.reference(*args)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lse, ref_lse, rtol=1e-5, atol=1e-6)  # -inf where a row has no key
    (call,) = CALLS
    assert call["scale"] == 0.3 and call["sparse_mode"] == (mode if mode is not None else 0)
    assert (call["mask"] is None) == (mode is None)
    if mask is not None:
        assert torch.equal(mask, before)  # the user's mask is read, not inverted in place


def test_attention_reasons(npu):
    """What FIA cannot take falls back to the torch reference, with the reason."""
    q, k, v = qkv(4, 4, dtype=torch.bfloat16)
    reason = attention._npu_reason
    plain = (q, k, v, None, None, 0.25, True, 0, 0.0, None)
    assert "npu tensors" in reason(*plain)  # everything else would be taken
    assert "fp16/bf16" in reason(q.float(), k.float(), v.float(), *plain[3:])
    assert "softcap" in reason(*plain[:8], 30.0, None)
    assert "sinks" in reason(*plain[:9], torch.zeros(4))
    assert "additive" in reason(q, k, v, torch.zeros(4, 4), *plain[4:])
    assert "per-head" in reason(q, k, v, torch.ones(1, 4, 4, 4, dtype=torch.bool), *plain[4:])
    q3, k3, v3 = qkv(4, 4, heads=6, kv_heads=4, dtype=torch.bfloat16)
    assert "kv heads" in reason(q3, k3, v3, *plain[3:])
    assert "differ" in reason(q, k, v[..., :8], *plain[3:])  # DeepSeek's MLA: v's head size is not k's
    for s_q, heads, d in ((4, 4, 24), (4, 4, 8), (1, 4, 576), (1, 320, 16)):  # FIA: D % 16 past one query, <= 512
        q4, k4, v4 = qkv(s_q, 4, heads=heads, kv_heads=heads // 2 if heads > 4 else 2, d=d, dtype=torch.bfloat16)
        assert "FIA: at most 256 heads" in reason(q4, k4, v4, *plain[3:]), (s_q, heads, d)
    q5, k5, v5 = qkv(1, 4, d=24, dtype=torch.bfloat16)  # one query: any head size up to 512
    assert "npu tensors" in reason(q5, k5, v5, *plain[3:])


def test_attention_on_transposed_views(npu):
    """HF hands the op q, k, v as transposed views of the projections: FIA gets them contiguous."""
    q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in qkv(5, 5))
    assert not q.is_contiguous()
    args = (q, k, v, None, None, 0.3, True, 0, 0.0, None)
    out, lse = attention.npu_forward(*args)
    ref_out, ref_lse = attention.reference(*args)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lse, ref_lse, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------- norms, SwiGLU, RoPE: the same approach
def rms_norm(x, gamma, epsilon=1e-6):
    """npu_rms_norm: fp32 inside, one rounding; gamma in x's dtype (documented)."""
    assert gamma.dtype == x.dtype
    rstd = torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + epsilon)
    return (x.double() * rstd * gamma.double()).to(x.dtype), rstd.float()


def swiglu(x, dim=-1):
    """npu_swiglu: A, B = split(x, 2, dim); A * sigmoid(A) * B (A the FIRST half)."""
    a, b = x.double().chunk(2, dim)
    return (a * torch.sigmoid(a) * b).to(x.dtype)


ROTARY_TABLE_SHAPES = {"half": {"BNSD": ("11SD", "B1SD", "BNSD"), "BSND": ("1S1D", "BS1D", "BSND")},
                       "interleave": {"BNSD": ("11SD",), "BSND": ("1S1D",)}}


def rotary_mul(x, r1, r2, rotary_mode="half"):
    """npu_rotary_mul: x * r1 + rotate(x) * r2, with r1 / r2 in one of the documented shapes for x's layout and
    mode, within the documented limits (interleave: B * N < 1000)."""
    assert x.dtype in (torch.float16, torch.bfloat16, torch.float32)
    layout = "BSND" if r1.shape[2] == 1 else "BNSD"  # the tables broadcast over the heads (S > 1 here)
    letters = {"B": x.shape[0], "N": x.shape[1] if layout == "BNSD" else x.shape[2],
               "S": x.shape[2] if layout == "BNSD" else x.shape[1], "D": x.shape[3], "1": 1}
    forms = ROTARY_TABLE_SHAPES[rotary_mode][layout]
    assert any(tuple(letters[c] for c in form) == tuple(r1.shape) for form in forms), (rotary_mode, r1.shape)
    assert rotary_mode == "half" or letters["B"] * letters["N"] < 1000
    x64 = x.double()
    if rotary_mode == "half":
        x1, x2 = x64.chunk(2, -1)
        rotated = torch.cat((-x2, x1), -1)
    else:
        rotated = torch.stack((-x64[..., 1::2], x64[..., ::2]), -1).flatten(-2)
    return (x64 * r1.double() + rotated * r2.double()).to(x.dtype)


@pytest.fixture
def npu_ops(npu):
    npu.npu_rms_norm, npu.npu_swiglu, npu.npu_rotary_mul = rms_norm, swiglu, rotary_mul
    return npu


def ulps(a, b):
    """The largest difference in ulps of a's dtype at b's largest magnitude: one or two roundings placed otherwise
    (the NPU rounds once, eager after each product) move an element by about that much, near zero too."""
    return (a.double() - b.double()).abs().max().item() / (torch.finfo(a.dtype).eps * b.double().abs().max().item())


@pytest.mark.parametrize("cast", ["normed", "output"])
def test_rms_norm(npu_ops, cast):
    """Llama's "normed" runs the op with a unit gamma and multiplies by the weight after; "output" passes it."""
    x = torch.randn(3, 5, 64, dtype=torch.bfloat16)
    w = (1 + 0.1 * torch.randn(64)).to(torch.bfloat16)
    y, rstd = rms_norm_ops.npu_forward(x, w, 1e-6, 0.0, cast)
    ref, ref_rstd = rms_norm_ops.reference(x, w, 1e-6, 0.0, cast)
    assert y.dtype == ref.dtype and rstd.shape == ref_rstd.shape == (3, 5)
    torch.testing.assert_close(rstd, ref_rstd, rtol=1e-6, atol=0)
    assert ulps(y, ref) <= 1  # the op's fp32 sum vs ours may flip a rounding


@pytest.mark.parametrize("gate_first", [True, False])
def test_swiglu_fused(npu_ops, gate_first):
    from mojo_compile.ops import gated_act

    gu = torch.randn(4, 2 * 48, dtype=torch.bfloat16)
    reason = gated_act._npu_reason(gu, "silu", gate_first)
    if not gate_first:
        assert "first half" in reason
        return
    y = gated_act.npu_fused_forward(gu, "silu", True)
    assert ulps(y, gated_act.fused_reference(gu, "silu", True)) <= 1  # eager rounds silu(g) first


@pytest.mark.parametrize("seq_dim", [1, 2])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("cos_batch", [1, 2])
def test_rope(npu_ops, seq_dim, interleaved, cos_batch):
    """cos/sin [S, D] or [B, S, D] reach npu_rotary_mul in a documented shape for q's layout; values as eager's."""
    shape_q, shape_k = ((2, 7, 4, 32), (2, 7, 2, 32)) if seq_dim == 1 else ((2, 4, 7, 32), (2, 2, 7, 32))
    q, k = torch.randn(shape_q, dtype=torch.bfloat16), torch.randn(shape_k, dtype=torch.bfloat16)
    angles = torch.rand(cos_batch, 7, 32) * 6
    cos, sin = angles.cos().to(torch.bfloat16), angles.sin().to(torch.bfloat16)
    if cos_batch == 1:
        cos, sin = cos[0], sin[0]
    args = (q, k, cos, sin, 32, interleaved, seq_dim, False)
    if interleaved and cos_batch > 1:  # interleave mode takes one table for the whole batch
        assert "table per batch row" in rope._npu_reason(*args)
        return
    assert "npu tensors" in rope._npu_reason(*args)  # nothing else refused
    for out, ref in zip(rope.npu_forward(*args), rope.reference(*args)):
        assert out.shape == ref.shape and out.is_contiguous()
        assert ulps(out, ref) <= 2  # eager rounds each product; the op rounds once


def test_rope_reasons(npu_ops):
    q, k = torch.randn(1, 3, 4, 32, dtype=torch.bfloat16), torch.randn(1, 3, 2, 32, dtype=torch.bfloat16)
    cos = sin = torch.randn(3, 32, dtype=torch.bfloat16)
    reason = rope._npu_reason
    assert "whole head" in reason(q, k, cos[:, :16], sin[:, :16], 16, False, 1, False)
    assert "dtype" in reason(q, k, cos.float(), sin.float(), 32, False, 1, False)
    wide = torch.randn(1, 3, 2, 896, dtype=torch.bfloat16)
    assert "limits" in reason(wide, wide, *(torch.randn(3, 896, dtype=torch.bfloat16),) * 2, 896, False, 1, False)
    assert "fp16/bf16/fp32" in reason(q.double(), k.double(), cos.double(), sin.double(), 32, False, 1, False)
    many = torch.randn(40, 3, 32, 32, dtype=torch.bfloat16)  # B * N = 1280: over interleave's limit, not half's
    assert "interleave limit" in reason(many, many, cos, sin, 32, True, 1, False)
    assert "npu tensors" in reason(many, many, cos, sin, 32, False, 1, False)


def test_swiglu_and_rms_norm_reasons(npu_ops):
    """Inputs the documented ops cannot take fall back: npu_swiglu takes no fp64 or empty tensor (and gets a
    contiguous one), npu_rms_norm 2 to 8 dims, npu_add_rms_norm no empty tensor."""
    from mojo_compile.ops import gated_act

    gu = torch.randn(4, 96, dtype=torch.bfloat16)
    assert "fp16/bf16/fp32" in gated_act._npu_reason(gu.double(), "silu", True)
    assert "empty" in gated_act._npu_reason(gu[:0], "silu", True)
    assert "npu tensors" in gated_act._npu_reason(gu, "silu", True)
    calls = []
    npu_ops.npu_swiglu = lambda x, dim=-1: calls.append(x.is_contiguous()) or swiglu(x, dim)
    gated_act.npu_fused_forward(gu.t().contiguous().t(), "silu", True)
    assert calls == [True]
    w = torch.randn(64, dtype=torch.bfloat16)
    x = torch.randn(64, dtype=torch.bfloat16)
    assert "1-D" in rms_norm_ops._npu_reason(x, w, 0.0, "output")
    assert "9-D" in rms_norm_ops._npu_reason(x.reshape((1,) * 8 + (64,)), w, 0.0, "output")
    empty = torch.randn(0, 64, dtype=torch.bfloat16)
    assert "empty" in rms_norm_ops._npu_add_reason(empty, empty, w, 1e-6, 0.0, "output")
    assert "npu tensors" in rms_norm_ops._npu_add_reason(x[None], x[None], w, 1e-6, 0.0, "output")


def add_layer_norm(x1, x2, gamma, beta, epsilon=1e-5, additional_output=False):
    """npu_add_layer_norm (aclnnAddLayerNorm): x = x1 + x2; y = (x - mean) * rstd * gamma + beta, fp32 inside and
    rounded once; mean and rstd fp32 shaped [..., 1]; x returned only with additional_output (else empty)."""
    assert x1.shape == x2.shape and x1.dtype == x2.dtype == gamma.dtype == beta.dtype
    assert gamma.shape == beta.shape == x1.shape[-1:]
    x = x1.double() + x2.double()
    mean = x.mean(-1, keepdim=True)
    rstd = torch.rsqrt((x - mean).pow(2).mean(-1, keepdim=True) + epsilon)
    y = ((x - mean) * rstd * gamma.double() + beta.double()).to(x1.dtype)
    return y, mean.float(), rstd.float(), x.to(x1.dtype) if additional_output else torch.empty(0)


@pytest.mark.parametrize("affine", ["weight_and_bias", "weight", "none"])
def test_add_layer_norm(npu, monkeypatch, affine):
    """The residual LayerNorm on npu_add_layer_norm: the sum asked for, unit gamma / zero beta for a missing weight
    or bias, statistics reshaped to the rows; against the torch reference of the op."""
    from mojo_compile.ops import layer_norm

    monkeypatch.setattr(sys.modules["torch_npu"], "npu_add_layer_norm", add_layer_norm, raising=False)
    x, r = (torch.randn(3, 5, 64, dtype=torch.bfloat16) * 2 + 1 for _ in range(2))
    w = (1 + 0.3 * torch.randn(64)).to(torch.bfloat16) if affine != "none" else None
    b = torch.randn(64).to(torch.bfloat16) if affine == "weight_and_bias" else None
    y, total, mean, rstd = layer_norm.npu_add_forward(x, r, w, b, 1e-5)
    ref_y, ref_total, ref_mean, ref_rstd = layer_norm.add_reference(x, r, w, b, 1e-5)
    assert torch.equal(total, ref_total) and mean.shape == rstd.shape == (3, 5) and mean.dtype == torch.float32
    # the statistics are the NPU op's own (of the exact sum), handed on per row: those the backward reads
    _, npu_mean, npu_rstd, _ = add_layer_norm(x, r, *(p if p is not None else q for p, q in (
        (w, torch.ones(64, dtype=x.dtype)), (b, torch.zeros(64, dtype=x.dtype)))))
    assert torch.equal(mean, npu_mean[..., 0]) and torch.equal(rstd, npu_rstd[..., 0])
    # and within a bf16 rounding of the reference's (of the rounded sum): a unit roundoff of the largest sum
    torch.testing.assert_close(mean, ref_mean, rtol=0, atol=2 ** -8 * ref_total.abs().max().item())
    assert ulps(y, ref_y) <= 2  # the exact sum vs eager's rounded one, and one rounding of y placed otherwise


def test_layer_norm_reasons(npu):
    """What npu_add_layer_norm cannot take stays on the torch reference, with the reason."""
    from types import SimpleNamespace

    from mojo_compile.ops import layer_norm

    assert "npu tensors" in layer_norm._npu_reason(torch.randn(2, 8))
    on_npu = SimpleNamespace(device=SimpleNamespace(type="npu"), dtype=torch.bfloat16)
    assert layer_norm._npu_reason(on_npu, torch.randn(8).to(torch.bfloat16), None) is None
    assert "gamma and beta in the dtype of x" in layer_norm._npu_reason(on_npu, torch.randn(8), None)
    assert "not fp16/bf16/fp32" in layer_norm._npu_reason(SimpleNamespace(device=on_npu.device, dtype=torch.float64))


# -------------------------------------------------------------------------- ttx on the NPU (triton-ascend)
@pytest.fixture
def ascend(monkeypatch):
    """Optionally triton-ascend: the installed Triton reporting the "ascend" backend (`with_triton_ascend(True)`).
    The NPU itself is `on_npu`'s stand-in tensors."""
    from mojo_compile.kernels import common

    def with_triton_ascend(present: bool):
        backends = frozenset({"ascend"} if present else {"nvidia", "amd"})
        monkeypatch.setattr(common, "triton_backends", lambda: backends)
    return with_triton_ascend


class _OnNpu(torch.Tensor):
    """A meta tensor that says it is on an NPU: what the compiler's choices read (device, shape, dtype, strides),
    without renaming torch's PrivateUse1 backend, which would stay renamed for the rest of the process."""
    DEVICE = types.SimpleNamespace(type="npu", index=0)

    @property
    def device(self):
        return self.DEVICE


def on_npu(*shape, dtype=torch.bfloat16, stride=None):
    meta = torch.empty_strided(shape, stride or torch.empty(shape, device="meta").stride(), dtype=dtype,
                               device="meta")
    return torch.Tensor._make_subclass(_OnNpu, meta)


@pytest.fixture
def npu_target(npu):
    """The torch_npu target loaded with the stand-in torch_npu, forgotten after."""
    loader = lowering._LOADERS["torch_npu"]
    lowering.register_target("torch_npu", loader)
    yield
    lowering.register_target("torch_npu", loader)


def test_npu_inputs_default_to_ttx_where_triton_ascend_is(ascend, npu_target):
    from mojo_compile.backend import resolve_target

    inputs = [on_npu(2, 8)]
    ascend(True)
    assert resolve_target(None, inputs) == "ttx"
    ascend(False)  # NVIDIA's Triton installed: torch_npu's fused ops
    assert resolve_target(None, inputs) == "torch_npu"
    ascend(True)  # MOJO_BACKEND / options["target"] still pick
    assert resolve_target("torch_npu", inputs) == "torch_npu"


def test_ttx_on_the_npu_falls_back_to_torch_npu_then_torch(ascend, npu_target, caplog):
    """What the Triton kernels cannot take goes to torch_npu's fused op, and what neither can to the reference;
    each step is logged with its reason, and the report's target is the one chosen."""
    ascend(True)
    x, w = on_npu(4, 64), on_npu(64)
    assert lowering.choose("rms_norm", "ttx", x, w, 1e-6, 0.0, "output") == ("ttx", None)
    strided = on_npu(64, stride=(2,))  # the kernels want a contiguous weight; npu_rms_norm does not care
    lowering._LOGGED.clear()
    with caplog.at_level(logging.WARNING, logger="mojo_compile"):
        chosen, reason = lowering.choose("rms_norm", "ttx", x, strided, 1e-6, 0.0, "output")
        assert (chosen, reason) == ("torch_npu", "weight is not contiguous")
        assert "rms_norm: ttx falls back to torch_npu: weight is not contiguous" in caplog.text
        # cast="rstd" in bf16: npu_rms_norm cannot round as that spelling does, nor the kernels take the weight
        chosen, _ = lowering.choose("rms_norm", "ttx", x, strided, 1e-6, 0.0, "rstd")
        assert chosen == "torch"
        assert "rms_norm: torch_npu falls back to torch: npu_rms_norm does not round" in caplog.text
    ascend(False)
    assert lowering.choose("rms_norm", "ttx", x, w, 1e-6, 0.0, "output")[0] == "torch_npu"


def test_the_tuner_times_ttx_against_torch_npu(ascend, npu_target, monkeypatch, tmp_path):
    """MOJO_TUNE=1 on an NPU: where both the Triton kernels and torch_npu's fused op take the call, the faster is
    chosen (here a stand-in timer makes torch_npu faster), and kept per shape bucket."""
    from mojo_compile import tuner
    from mojo_compile.ops import rms_norm as ops

    ascend(True)
    monkeypatch.setenv("MOJO_TUNE", "1")
    monkeypatch.setenv("MOJO_TUNE_CACHE", str(tmp_path / "tune.json"))
    monkeypatch.setattr(tuner, "like", lambda t: t)  # no NPU to allocate on: the timer below never runs them
    timed = []

    def timer(fn, device_type):
        timed.append((fn.func.__name__, device_type))
        return 1.0 if fn.func is ops.npu_forward else 2.0
    monkeypatch.setattr(tuner, "_default_timer", timer)
    x, w = on_npu(4, 64), on_npu(64)
    assert lowering.choose("rms_norm", "ttx", x, w, 1e-6, 0.0, "output") == ("torch_npu", None)
    assert sorted(timed) == [("npu_forward", "npu"), ("ttx_forward", "npu")]
    assert lowering.choose("rms_norm", "ttx", x, w, 1e-6, 0.0, "output")[0] == "torch_npu"  # from the cache
    assert len(timed) == 2


def test_ttx_takes_every_rope_layout_on_the_npu(ascend, npu_target):
    """The RoPE and qk-norm + RoPE kernels load rotation partners as affine tiles on Ascend (PAIR_TILES,
    kernels/rope.py), so ttx takes every layout there: rotate-half, interleaved, partial rotary, forward and
    backward, with and without the norm."""
    ascend(True)
    q, k, w = on_npu(1, 4, 2, 16), on_npu(1, 4, 2, 16), on_npu(16)
    for rotary, interleaved in ((16, False), (16, True), (8, False), (8, True)):
        table = on_npu(4, rotary, dtype=torch.float32)
        rope_args = (table, table, rotary, interleaved, 1, False)  # seq_dim 1, rotate_last False
        assert lowering.choose("rope", "ttx", q, k, *rope_args) == ("ttx", None)
        assert lowering.choose("rope_backward", "ttx", q, k, *rope_args, q.dtype, k.dtype) == ("ttx", None)
        for together in (False, True):
            width = on_npu(2 * 16) if together else w
            norm_args = (table, table, rotary, interleaved, 1, together)  # seq_dim 1
            assert lowering.choose("qk_norm_rope", "ttx", q, k, width, width, 1e-6, 0.0, "output",
                                   *norm_args) == ("ttx", None)
            rstd = on_npu(1, 4, dtype=torch.float32) if together else on_npu(1, 4, 2, dtype=torch.float32)
            assert lowering.choose("qk_norm_rope_backward", "ttx", q, k, q, k, width, width, rstd, rstd, 0.0,
                                   "output", *norm_args) == ("ttx", None)
