"""RoPE and qk-norm + RoPE: every spelling matched (q and k in one op) with its exact count, equal to eager in values
and gradients; look-alikes left alone; opcheck for each op."""
import copy

import pytest
import torch

import mojo_compile
from conftest import DEVICE, KERNEL_TARGET_OK, TARGETS, rel

mojo = torch.ops.mojo


def rotate_half(x):  # R1 (Llama)
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x):  # R4 (Cohere, GLM)
    return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)


def apply(q, k, cos, sin, rotate=rotate_half, unsqueeze_dim=1):
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + rotate(q) * sin, k * cos + rotate(k) * sin


def apply_partial(q, k, cos, sin, rotate=rotate_half):  # R2 (GPT-NeoX): rotary_dim = cos.shape[-1]
    r = cos.shape[-1]
    q_rot, k_rot = apply(q[..., :r], k[..., :r], cos, sin, rotate)
    return torch.cat([q_rot, q[..., r:]], dim=-1), torch.cat([k_rot, k[..., r:]], dim=-1)


class Attention(torch.nn.Module):
    """The front half of an HF attention: projections, heads, RoPE; returns q and k (what attention would read)."""

    def __init__(self, apply_fn, head_dim=16, rotary_dim=16, layout="bhsd"):
        super().__init__()
        self.q_proj, self.k_proj = torch.nn.Linear(32, 4 * head_dim), torch.nn.Linear(32, 2 * head_dim)
        self.apply_fn, self.head_dim, self.rotary_dim, self.layout = apply_fn, head_dim, rotary_dim, layout

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, -1, self.head_dim)
        k = self.k_proj(x).view(b, s, -1, self.head_dim)
        if self.layout == "bhsd":
            q, k = q.transpose(1, 2), k.transpose(1, 2)
            return self.apply_fn(q, k, cos, sin)
        return self.apply_fn(q, k, cos, sin, unsqueeze_dim=2)


def tables(b, s, rotary_dim, dtype, interleaved=False):
    """HF-style cos/sin: duplicated halves (or pairs, interleaved), from positions and inverse frequencies."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, rotary_dim, 2, device=DEVICE).float() / rotary_dim))
    freqs = torch.arange(s, device=DEVICE).float()[:, None] * inv_freq
    emb = freqs.repeat_interleave(2, -1) if interleaved else torch.cat((freqs, freqs), -1)
    return emb.cos().expand(b, s, -1).to(dtype), emb.sin().expand(b, s, -1).to(dtype)


def check(model, dtype, cos_dtype, rotary_dim, interleaved=False, target="torch"):
    """Compiled vs eager: outputs equal bit for bit (the op reproduces eager's roundings on every target); each
    gradient, against an fp64 copy of the model, as accurate as eager's (normwise, within 1.5x + 1e-3: the fused
    backward keeps fp32 where eager rounds to the dtype between ops, so it is usually the more accurate)."""
    model = model.to(DEVICE, dtype)
    golden = copy.deepcopy(model).double()
    x = torch.randn(2, 7, 32, device=DEVICE, dtype=dtype, requires_grad=True)
    cos, sin = tables(2, 7, rotary_dim, cos_dtype, interleaved)
    compiled = torch.compile(model, backend="mojo", options={"inner_compiler": "eager", "target": target})

    def grads(fn, m, x, cos, sin):
        out = fn(x, cos, sin)
        return out, torch.autograd.grad(sum(o.double().square().sum() for o in out), [x, *m.parameters()])

    out, got = grads(compiled, model, x, cos, sin)
    ref, eager = grads(model, model, x, cos, sin)
    x64 = x.detach().double().requires_grad_()
    _, exact = grads(golden, golden, x64, cos.double(), sin.double())
    for o, r in zip(out, ref):
        assert o.dtype == r.dtype and torch.equal(o, r)
    for g, g_eager, g_exact in zip(got, eager, exact):
        assert rel(g, g_exact) <= 1.5 * rel(g_eager, g_exact) + 1e-3, (rel(g, g_exact), rel(g_eager, g_exact))
    return [(s.pattern, s.op, s.target) for s in mojo_compile.last_report().sites]


SPELLINGS = {  # name -> (apply fn, head_dim, rotary_dim, interleaved, layout, pattern)
    "llama": (apply, 16, 16, False, "bhsd", "rope.rotate_half"),
    "bshd": (apply, 16, 16, False, "bshd", "rope.rotate_half.bshd"),
    "gpt_neox_partial": (apply_partial, 16, 4, False, "bhsd", "rope.rotate_half.partial"),
    "phi_half": (apply_partial, 16, 8, False, "bhsd", "rope.rotate_half.partial"),
    "cohere_interleaved": (lambda q, k, c, s: apply(q, k, c, s, rotate_every_two), 16, 16, True, "bhsd",
                           "rope.interleaved"),
    "glm_partial_interleaved": (lambda q, k, c, s: apply_partial(q, k, c, s, rotate_every_two), 16, 8, True, "bhsd",
                                "rope.interleaved.partial"),
}


@pytest.mark.parametrize("spelling", list(SPELLINGS))
@pytest.mark.parametrize("dtypes", [(torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float32),
                                    (torch.float32, torch.float32)], ids=["bf16", "bf16_fp32cos", "fp32"])
def test_spellings(spelling, dtypes):
    apply_fn, head_dim, rotary_dim, interleaved, layout, pattern = SPELLINGS[spelling]
    sites = check(Attention(apply_fn, head_dim, rotary_dim, layout), *dtypes, rotary_dim, interleaved)
    assert sites == [(pattern, "mojo.rope", "torch")]


@pytest.mark.skipif(not KERNEL_TARGET_OK, reason="needs CUDA or TRITON_INTERPRET=1")
@pytest.mark.parametrize("spelling", ["llama", "gpt_neox_partial", "glm_partial_interleaved", "bshd"])
def test_ttx_target(spelling):
    apply_fn, head_dim, rotary_dim, interleaved, layout, pattern = SPELLINGS[spelling]
    sites = check(Attention(apply_fn, head_dim, rotary_dim, layout), torch.bfloat16, torch.bfloat16, rotary_dim,
                  interleaved, "ttx")
    assert sites == [(pattern, "mojo.rope", "ttx")]


def _opposite_sign(x):  # nanochat: cat((x2, -x1)), the other rotation direction
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((x2, -x1), dim=-1)


def _halves_swapped(x):  # not a rotation: cat((x1, -x2))
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((x1, -x2), dim=-1)


@pytest.mark.parametrize("rotate", [_opposite_sign, _halves_swapped])
def test_other_cat_orders_stay(rotate):
    sites = check(Attention(lambda q, k, c, s: apply(q, k, c, s, rotate)), torch.bfloat16, torch.bfloat16, 16)
    assert sites == []


def test_cos_narrower_than_the_rotated_width_stays():
    """cos/sin of half the width, broadcast against the rotated slice: not a rotation the op computes."""
    def apply_narrow(q, k, cos, sin):
        return apply(q, k, cos[..., :1], sin[..., :1])
    sites = check(Attention(apply_narrow), torch.bfloat16, torch.bfloat16, 16)
    assert sites == []


class QKNorm(torch.nn.Module):
    """Qwen3 (Q1), Gemma3 (Q2, 1 + w), OLMo2 (Q3, over H*D): RMSNorm of q and k, then RoPE."""

    def __init__(self, layout, head_dim=16):
        super().__init__()
        self.layout, self.d = layout, head_dim
        self.q_proj, self.k_proj = torch.nn.Linear(32, 4 * head_dim), torch.nn.Linear(32, 2 * head_dim)
        width = (4, 2) if layout == "q3" else (1, 1)
        self.q_w = torch.nn.Parameter(1 + 0.1 * torch.randn(width[0] * head_dim))
        self.k_w = torch.nn.Parameter(1 + 0.1 * torch.randn(width[1] * head_dim))

    @staticmethod
    def llama_norm(x, w):
        x32 = x.float()
        return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)

    @staticmethod
    def output_norm(x, w, offset):
        x32 = x.float()
        return ((x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)) * (offset + w.float())).to(x.dtype)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q, k = self.q_proj(x), self.k_proj(x)
        if self.layout == "q1":
            q = self.llama_norm(q.view(b, s, -1, self.d), self.q_w).transpose(1, 2)
            k = self.llama_norm(k.view(b, s, -1, self.d), self.k_w).transpose(1, 2)
        elif self.layout == "q2":
            q = self.output_norm(q.view(b, s, -1, self.d).transpose(1, 2), self.q_w, 1.0)
            k = self.output_norm(k.view(b, s, -1, self.d).transpose(1, 2), self.k_w, 1.0)
        else:
            q = self.output_norm(q, self.q_w, 0.0).view(b, s, -1, self.d).transpose(1, 2)
            k = self.output_norm(k, self.k_w, 0.0).view(b, s, -1, self.d).transpose(1, 2)
        return apply(q, k, cos, sin)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("layout", ["q1", "q2", "q3"])
def test_qk_norm_rope(layout, target):
    sites = check(QKNorm(layout), torch.bfloat16, torch.bfloat16, 16, target=target)
    assert [s[1:] for s in sites] == [("mojo.qk_norm_rope", target)]
    assert sites[0][0].startswith(f"qk_norm_rope.{layout}.")


def test_disabling_qk_norm_rope_keeps_the_two_ops():
    model = QKNorm("q1").to(DEVICE, torch.bfloat16)
    x = torch.randn(2, 7, 32, device=DEVICE, dtype=torch.bfloat16)
    cos, sin = tables(2, 7, 16, torch.bfloat16)
    torch.compile(model, backend="mojo", options={"inner_compiler": "eager", "disable": ["qk_norm_rope"]})(x, cos, sin)
    assert sorted(mojo_compile.last_report().counts().items()) == [("mojo.rms_norm", 2), ("mojo.rope", 1)]


@pytest.mark.parametrize("target", TARGETS)
def test_opcheck(target):
    q = torch.randn(2, 4, 5, 16, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(2, 2, 5, 16, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    cos, sin = tables(2, 5, 8, torch.bfloat16)
    torch.library.opcheck(mojo.rope.default, (q, k, cos, sin, 8, False, 2, False, target))
    torch.library.opcheck(mojo.rope.default, (q, k, cos.float(), sin.float(), 8, True, 2, True, target))
    torch.library.opcheck(mojo.rope_backward.default, (q.detach(), k.detach(), cos, sin, 8, False, 2, False,
                                                       torch.bfloat16, torch.bfloat16, target))
    qs, ks = q.detach().transpose(1, 2).contiguous().requires_grad_(), k.detach().transpose(1, 2).contiguous()
    wq, wk = (torch.randn(16, device=DEVICE, dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    cos16, sin16 = tables(2, 5, 16, torch.bfloat16)
    torch.library.opcheck(mojo.qk_norm_rope.default, (qs, ks.requires_grad_(), wq, wk, 1e-6, 0.0, "normed", cos16,
                                                      sin16, 16, False, 1, False, target))
    out = mojo.qk_norm_rope(qs, ks, wq, wk, 1e-6, 0.0, "normed", cos16, sin16, 16, False, 1, False, target)
    torch.library.opcheck(mojo.qk_norm_rope_backward.default,
                          (torch.randn_like(qs), torch.randn_like(ks), qs.detach(), ks.detach(), wq.detach(),
                           wk.detach(), out[2].detach(), out[3].detach(), 0.0, "normed", cos16, sin16, 16, False, 1,
                           False, target))


def test_bad_arguments_are_clear_errors():
    q, k = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)
    cos = torch.randn(1, 3, 8)
    with pytest.raises(ValueError, match="must be 4-D"):
        mojo.rope(q[0], k[0], cos, cos, 8, False, 2, False, "torch")
    with pytest.raises(ValueError, match="rotary_dim 10 must be even and at most head_dim 8"):
        mojo.rope(q, k, cos, cos, 10, False, 2, False, "torch")
    with pytest.raises(ValueError, match="cos/sin have 8 columns"):
        mojo.rope(q, k, cos, cos, 4, False, 2, False, "torch")


def test_cos_that_needs_a_gradient_is_refused():
    q, k = torch.randn(1, 2, 3, 8, requires_grad=True), torch.randn(1, 2, 3, 8)
    cos = torch.randn(1, 3, 8, requires_grad=True)
    with pytest.raises(RuntimeError, match="cos and sin take no gradient"):
        mojo.rope(q, k, cos, cos.detach(), 8, False, 2, False, "torch")
