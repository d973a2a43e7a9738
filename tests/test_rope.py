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


def apply_half_table(q, k, cos, sin, unsqueeze_dim=1):
    """R4b, GLM / GLM-4 / moonshine (transformers models/glm/modeling_glm.py apply_rotary_pos_emb): the first half of
    cos / sin repeat-interleaved inside apply, interleaved pairs rotated over that width, the rest of the head
    concatenated back (an empty rest when the rotary is the whole head)."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    cos = cos[..., : cos.shape[-1] // 2].repeat_interleave(2, dim=-1)
    sin = sin[..., : sin.shape[-1] // 2].repeat_interleave(2, dim=-1)
    rotary_dim = cos.shape[-1]
    q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]
    k_rot, k_pass = k[..., :rotary_dim], k[..., rotary_dim:]
    q_embed = (q_rot * cos) + (rotate_every_two(q_rot) * sin)
    k_embed = (k_rot * cos) + (rotate_every_two(k_rot) * sin)
    return torch.cat([q_embed, q_pass], dim=-1), torch.cat([k_embed, k_pass], dim=-1)


def apply_half_table_whole_head(q, k, cos, sin, unsqueeze_dim=1):
    """R4b as Helium / ERNIE-4.5 (fp32) write it: the same table, the whole head rotated, no concatenation."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    cos = cos[..., : cos.shape[-1] // 2].repeat_interleave(2, dim=-1)
    sin = sin[..., : sin.shape[-1] // 2].repeat_interleave(2, dim=-1)
    return (q * cos) + (rotate_every_two(q) * sin), (k * cos) + (rotate_every_two(k) * sin)


def check_against_fp64(model, cos, sin, target):
    """An fp32 model compiled and run eagerly, each against an fp64 copy run eagerly (the plain spelling): the
    rotated q and k, and the gradients of x and of every parameter. Bound: compiled's normwise error is at most 2x
    eager's + 1e-6. The op computes each column as eager's spelling does, in fp32, but a kernel may round in another
    order (a fused multiply-add), so its error is of eager's size rather than equal to it; the 1e-6 covers an eager
    error that happens to be near 0. Returns the fused sites as (pattern, op, target)."""
    model = model.to(DEVICE)
    golden = copy.deepcopy(model).double()
    x = torch.randn(2, 7, 32, device=DEVICE, requires_grad=True)
    compiled = torch.compile(model, backend="mojo", options={"inner_compiler": "eager", "target": target})
    weights = None

    def run(fn, m, x, cos, sin):
        nonlocal weights
        out = fn(x, cos, sin)
        if weights is None:  # one random cotangent per output, the same for the three runs
            weights = [torch.randn(o.shape, device=DEVICE, dtype=torch.float64) for o in out]
        loss = sum((o.double() * w).sum() for o, w in zip(out, weights))
        return out, torch.autograd.grad(loss, [x, *m.parameters()])

    out, got = run(compiled, model, x, cos, sin)
    fused = [(s.pattern, s.op, s.target) for s in mojo_compile.last_report().sites]
    ref, eager = run(model, model, x, cos, sin)
    exact_out, exact = run(golden, golden, x.detach().double().requires_grad_(), cos.double(), sin.double())
    for o, r, e in zip([*out, *got], [*ref, *eager], [*exact_out, *exact]):
        assert o.shape == r.shape and o.dtype == r.dtype
        assert rel(o, e) <= 2 * rel(r, e) + 1e-6, (rel(o, e), rel(r, e))
    return fused


HALF_TABLE_SPELLINGS = {  # name -> (apply fn, rotary_dim of a head of 16, pattern without its layout suffix)
    "glm_partial": (apply_half_table, 8, "rope.interleaved.half_table.partial"),
    "glm_whole_head": (apply_half_table, 16, "rope.interleaved.half_table"),  # the cat of an empty rest stays
    "helium": (apply_half_table_whole_head, 16, "rope.interleaved.half_table"),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("spelling", list(HALF_TABLE_SPELLINGS))
def test_half_table_interleaved_rope_fuses_and_matches_fp64(spelling, layout, target):
    """R4b (GLM's half cos repeat-interleaved inside apply) fuses into one mojo.rope for q and k, for a partial
    rotary and the whole head, q as [B, H, S, D] and [B, S, H, D]; with HF's tables (equal halves)."""
    apply_fn, rotary_dim, pattern = HALF_TABLE_SPELLINGS[spelling]
    cos, sin = tables(2, 7, rotary_dim, torch.float32)
    fused = check_against_fp64(Attention(apply_fn, 16, rotary_dim, layout), cos, sin, target)
    assert fused == [(pattern + ("" if layout == "bhsd" else ".bshd"), "mojo.rope", target)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("spelling", list(HALF_TABLE_SPELLINGS))
def test_half_table_whose_halves_differ_rotates_as_eager(spelling, target):
    """Tables whose second half differs from the first (random): eager reads only the first half, and so does the
    fused op (the replacement takes the same half of the [B, S, R] table), so the numbers are still eager's."""
    apply_fn, rotary_dim, pattern = HALF_TABLE_SPELLINGS[spelling]
    cos, sin = (torch.randn(2, 7, rotary_dim, device=DEVICE) for _ in range(2))
    assert not torch.equal(cos[..., : rotary_dim // 2], cos[..., rotary_dim // 2:])
    fused = check_against_fp64(Attention(apply_fn, 16, rotary_dim), cos, sin, target)
    assert fused == [(pattern, "mojo.rope", target)]


def _second_half_repeated(table):
    return table[..., table.shape[-1] // 2:].repeat_interleave(2, dim=-1)


def _first_quarter_repeated(table):
    return table[..., : table.shape[-1] // 4].repeat_interleave(2, dim=-1)


@pytest.mark.parametrize("take", [_second_half_repeated, _first_quarter_repeated])
def test_half_table_sliced_elsewhere_stays(take):
    """A table sliced other than at its first half -- the second half; the first quarter, which rotates a narrower
    partial width -- is not R4b: the pattern's slice bounds, literals of its trace, are checked against the graph's
    by the re-trace with the real shapes, so nothing fuses and the numbers are eager's."""
    def apply_sliced(q, k, cos, sin):
        c, s = take(cos.unsqueeze(1)), take(sin.unsqueeze(1))
        r = c.shape[-1]
        q_rot, k_rot = q[..., :r], k[..., :r]
        return (torch.cat([q_rot * c + rotate_every_two(q_rot) * s, q[..., r:]], dim=-1),
                torch.cat([k_rot * c + rotate_every_two(k_rot) * s, k[..., r:]], dim=-1))
    sites = check(Attention(apply_sliced, 16, 8), torch.bfloat16, torch.bfloat16, 8)
    assert sites == []


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("family", ["glm", "glm4"])
def test_hf_glm_rope_fuses_and_a_training_step_matches_fp64(family, target):
    """Tiny HF GLM / GLM-4 (R4b, partial rotary 0.5), batch 2 of odd length with left padding and labels: every
    layer's RoPE fuses, and the logits, the loss and every parameter's gradient are within 2x eager's error + 1e-6
    of an fp64 copy (fp32 model: the fused ops compute in fp32 as eager does, rounding in their own order)."""
    transformers = pytest.importorskip("transformers")
    config_class = {"glm": transformers.GlmConfig, "glm4": transformers.Glm4Config}[family]
    config = config_class(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=8, partial_rotary_factor=0.5,
                          max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).to(DEVICE).train()
    with torch.no_grad():  # norm weights away from their init (ones) so a wrong weight would show
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    golden = copy.deepcopy(model).double()
    ids = torch.randint(3, 100, (2, 11), device=DEVICE)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    labels = ids.masked_fill(mask == 0, -100)

    def step(fn, m):
        out = fn(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        grads = {n: p.grad.clone() for n, p in m.named_parameters()}
        m.zero_grad()
        return out, grads

    compiled = torch.compile(model, backend="mojo", options={"inner_compiler": "eager", "target": target})
    out, got = step(compiled, model)
    rope_sites = [(s.pattern, s.target) for s in mojo_compile.last_report().sites if s.op == "mojo.rope"]
    assert rope_sites == [("rope.interleaved.half_table.partial", target)] * config.num_hidden_layers
    ref, eager = step(model, model)
    exact, exact_grads = step(golden, golden)
    for name, o, r, e in [("logits", out.logits, ref.logits, exact.logits), ("loss", out.loss, ref.loss, exact.loss),
                          *((n, got[n], eager[n], exact_grads[n]) for n in exact_grads)]:
        assert rel(o, e) <= 2 * rel(r, e) + 1e-6, (name, rel(o, e), rel(r, e))


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
