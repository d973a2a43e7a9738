"""Attention: every HF spelling (eager, SDPA; GQA, sliding window, softcap) fused to one mojo.attention per layer,
the mask structure proven from the graph (never assumed), logits and gradients as accurate as eager's; the mask
analysis on its own; opcheck."""
import copy

import pytest
import torch
import torch.nn.functional as F

import mojo_compile
from mojo_compile import lowering
from conftest import DEVICE, KERNEL_TARGET_OK, TARGETS, rel
from mojo_compile.patterns.mask_analysis import MaskStructure, classify

transformers = pytest.importorskip("transformers")
mojo = torch.ops.mojo

COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2)
CONFIGS = {
    "llama": lambda: transformers.LlamaConfig(**COMMON),
    "qwen3": lambda: transformers.Qwen3Config(**COMMON, head_dim=16),
    "mistral": lambda: transformers.MistralConfig(**COMMON, sliding_window=5),
    "gemma2": lambda: transformers.Gemma2Config(**COMMON, head_dim=16, sliding_window=5),
    "phi3": lambda: transformers.Phi3Config(**COMMON),
}
# (family, attention implementation) -> the mask structure each layer's attention must have been proven to have
EXPECTED = {
    ("llama", "eager"): ["causal"] * 2, ("llama", "sdpa"): ["causal"] * 2,
    ("qwen3", "eager"): ["causal"] * 2, ("qwen3", "sdpa"): ["causal"] * 2,
    ("mistral", "eager"): ["causal, window 5"] * 2, ("mistral", "sdpa"): ["causal, window 5"] * 2,
    ("gemma2", "eager"): ["causal, window 5, softcap 50", "causal, softcap 50"],  # sliding / global layers
    ("phi3", "eager"): ["causal"] * 2, ("phi3", "sdpa"): ["causal"] * 2,
}


def expected_kernel(family, attn):
    """What the ttx attention runs at these sites (bf16, 20 query rows): cuDNN on a GPU where the proven structure
    is plain causal, else our Triton flash kernel."""
    from mojo_compile.lowering import attention_choice as choice

    plain = not any("window" in m or "softcap" in m for m in EXPECTED[(family, attn)])
    return "cuDNN (torch)" if DEVICE == "cuda" and plain and choice.cudnn_available() else "Triton flash"


def build(family, attn, dtype=torch.bfloat16):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(CONFIGS[family](), attn_implementation=attn)
    return model.to(DEVICE, dtype).eval()


def run(model, ids, backend, **kw):
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend, **kw)
    out = compiled(input_ids=ids, labels=ids, use_cache=False)
    out.loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    return out.logits, grads


@pytest.mark.parametrize("family,attn", list(EXPECTED), ids=[f"{f}-{a}" for f, a in EXPECTED])
@pytest.mark.parametrize("target", TARGETS)
def test_models(family, attn, target):
    """Against an fp64 copy of the model: logits and each parameter's gradient as accurate as eager's (1.5x + 1e-3;
    the fused op keeps fp32 scores and probabilities where eager rounds them to bf16, so it is usually better)."""
    model = build(family, attn)
    golden = copy.deepcopy(model).double()
    ids = torch.randint(3, 256, (2, 20), device=DEVICE)  # > 16 query rows: the prefill kernel, not split-KV decode
    logits, grads = run(model, ids, "mojo", options={"inner_compiler": "eager", "target": target})
    report = mojo_compile.last_report()
    sites = [s for s in report.sites if s.op == "mojo.attention"]
    assert [s.source for s in sites] == [f"model.layers.{i}.self_attn" for i in range(2)]
    assert [s.detail for s in sites] == [f"mask: {m} (proven from the mask subgraph)"
                                          for m in EXPECTED[(family, attn)]]
    assert {s.target for s in sites} == {target}
    assert {s.kernel for s in sites} == ({""} if target == "torch" else {f"kernel: {expected_kernel(family, attn)}"})
    ref_logits, ref_grads = run(model, ids, "eager")
    exact_logits, exact_grads = run(golden, ids, "eager")
    assert rel(logits, exact_logits) <= 1.5 * rel(ref_logits, exact_logits) + 1e-3
    for name, g in grads.items():
        err, eager_err = rel(g, exact_grads[name]), rel(ref_grads[name], exact_grads[name])
        assert err <= 1.5 * eager_err + 1e-3, (name, err, eager_err)


PADDED = {  # (family, attention implementation) -> what a left-padded batch's mask is proven to be
    ("llama", "sdpa"): "causal + key padding (proven from the mask subgraph)",
    ("mistral", "sdpa"): "causal, window 5 + key padding (proven from the mask subgraph)",
    # additive: eager gives a fully padded row 1/n per key (finfo.min everywhere), which no structure says
    ("llama", "eager"): "tensor",
}


@pytest.mark.parametrize("family,attn", list(PADDED), ids=[f"{f}-{a}" for f, a in PADDED])
@pytest.mark.parametrize("target", TARGETS)
def test_padding(family, attn, target):
    """A left-padded batch: the mask reads the user's attention_mask, a runtime input. Where the formula proves it
    is causal (+ window) and attention_mask[b, j] != 0, the op gets that structure and a [B, 1, 1, S] key mask
    instead of the S x S tensor. Every row -- the fully padded ones too -- and every gradient match eager."""
    model = build(family, attn, torch.float32)
    ids = torch.randint(3, 256, (2, 10), device=DEVICE)
    attention_mask = torch.ones(2, 10, dtype=torch.long, device=DEVICE)
    attention_mask[1, :4] = 0

    def run_padded(backend, **kw):
        torch._dynamo.reset()
        out = torch.compile(model, backend=backend, **kw)(input_ids=ids, attention_mask=attention_mask).logits
        out.square().mean().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        model.zero_grad()
        return out, grads

    out, grads = run_padded("mojo", options={"inner_compiler": "eager", "target": target})
    sites = [s for s in mojo_compile.last_report().sites if s.op == "mojo.attention"]
    ref, ref_grads = run_padded("eager")
    assert [s.detail for s in sites] == [f"mask: {PADDED[(family, attn)]}"] * 2
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    for name, g in grads.items():
        torch.testing.assert_close(g, ref_grads[name], rtol=1e-3, atol=1e-5, msg=name)


def _padded_attention(form):
    def attend(q, k, v, keep):
        n = q.shape[2]
        causal = torch.arange(n, device=q.device)[None, :] <= torch.arange(n, device=q.device)[:, None]
        keys = keep.bool()[:, None, None, :]
        mask = {"keys": lambda: causal & keys,
                "queries": lambda: causal & keep.bool()[:, None, :, None],
                "either": lambda: causal | keys,
                "heads": lambda: causal & (keep[:, :2].bool()[:, :, None, None] | keys),
                "shifted": lambda: causal & keep[:, 1:].bool()[:, None, None, :]}[form]()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return attend


@pytest.mark.parametrize("form,expected", [("keys", "causal + key padding (proven from the mask subgraph)"),
                                           ("queries", "tensor"), ("either", "tensor"), ("heads", "tensor"),
                                           ("shifted", "tensor")])
@pytest.mark.parametrize("dynamic", [False, True])
def test_key_padding_is_proven_only_where_it_holds(form, expected, dynamic):
    """Only `causal & keep[b, j]` is key padding. Padding of the queries, `causal | keep`, a mask that differs
    per head, or the mask read one key off (keep[b, j + 1]) keep their tensors; all give eager's values."""
    torch.manual_seed(0)
    length = 8 if form == "shifted" else 7
    q, k, v = (torch.randn(2, 2, 7, 8, device=DEVICE) for _ in range(3))
    keep = (torch.rand(2, length, device=DEVICE) > 0.3).long()
    keep[:, 0] = 1
    attend = _padded_attention(form)
    if dynamic:
        for t in (q, k, v):
            torch._dynamo.mark_dynamic(t, 2)
        torch._dynamo.mark_dynamic(keep, 1)
    torch._dynamo.reset()
    out = torch.compile(attend, backend="mojo", options={"inner_compiler": "eager"})(q, k, v, keep)
    assert [s.detail for s in mojo_compile.last_report().sites] == [f"mask: {expected}"]
    torch.testing.assert_close(out, attend(q, k, v, keep), rtol=1e-5, atol=1e-5)


class HandWritten(torch.nn.Module):
    """A hand-written model: plain F.scaled_dot_product_attention, MHA, default scale."""

    def __init__(self, causal):
        super().__init__()
        self.qkv, self.out, self.causal = torch.nn.Linear(32, 96), torch.nn.Linear(32, 32), causal

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, 4, 8).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.out(y.transpose(1, 2).reshape(b, s, 32))


@pytest.mark.parametrize("causal", [True, False])
def test_hand_written_sdpa(causal):
    model = HandWritten(causal).to(DEVICE)
    x = torch.randn(2, 7, 32, device=DEVICE, requires_grad=True)
    y = torch.compile(model, backend="mojo", options={"inner_compiler": "eager"})(x)
    (gx,) = torch.autograd.grad(y.square().sum(), x)
    y_ref = model(x)
    (gx_ref,) = torch.autograd.grad(y_ref.square().sum(), x)
    sites = mojo_compile.last_report().sites
    assert [s.detail for s in sites] == [f"mask: {'causal' if causal else 'none'}"]
    assert sites[0].pattern.startswith(f"attention.sdpa.plain{'.causal' if causal else ''}")
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gx, gx_ref, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------------------ mask analysis
def _causal(sq, skv, window=0):
    i = torch.arange(skv - sq, skv)[:, None]
    j = torch.arange(skv)[None, :]
    m = j <= i
    return m & (j > i - window) if window else m


def test_classify_proves_only_what_holds():
    assert classify(_causal(6, 6)[None, None], 6, 6) == MaskStructure(causal=True)
    assert classify(_causal(3, 8)[None, None].expand(2, 1, 3, 8), 3, 8) == MaskStructure(causal=True)  # bottom-right
    assert classify(_causal(7, 7, window=3)[None, None], 7, 7) == MaskStructure(causal=True, window=3)
    additive = torch.where(_causal(5, 5), 0.0, torch.finfo(torch.float32).min)[None, None]
    assert classify(additive, 5, 5) == MaskStructure(causal=True)
    assert classify(torch.ones(1, 1, 4, 4, dtype=torch.bool), 4, 4) == MaskStructure(causal=False)
    # not provable: padding (batches differ), a random mask, other additive values, a fully masked row,
    # a top-left aligned causal mask with Sq < Skv
    padded = _causal(5, 5)[None, None].repeat(2, 1, 1, 1)
    padded[1, :, :, :2] = False
    padded[1, :, :2, :] = True
    assert classify(padded, 5, 5) is None
    assert classify(torch.rand(1, 1, 5, 5) > 0.5, 5, 5) is None
    assert classify(torch.where(_causal(5, 5), 0.0, -2.0)[None, None], 5, 5) is None
    empty_row = _causal(4, 4).clone()
    empty_row[0, 0] = False
    assert classify(empty_row[None, None], 4, 4) is None
    top_left = torch.arange(8)[None, :] <= torch.arange(3)[:, None]
    assert classify(top_left[None, None], 3, 8) is None


def test_mask_from_runtime_positions_is_causal_at_those_positions():
    def attend(q, k, v, positions):
        mask = torch.arange(k.shape[2], device=q.device)[None, :] <= positions[:, None]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    q, k, v = (torch.randn(1, 2, 5, 8, device=DEVICE) for _ in range(3))
    positions = torch.arange(5, device=DEVICE)
    out = torch.compile(attend, backend="mojo", options={"inner_compiler": "eager"})(q, k, v, positions)
    assert [s.detail for s in mojo_compile.last_report().sites] == [
        "mask: causal at the query positions from arg2_1 (proven from the mask subgraph)"]
    torch.testing.assert_close(out, attend(q, k, v, positions), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------------------- the op
@pytest.mark.parametrize("target", TARGETS)
def test_opcheck(target):
    q = torch.randn(2, 4, 5, 16, device=DEVICE, requires_grad=True)
    k, v = (torch.randn(2, 2, 5, 16, device=DEVICE, requires_grad=True) for _ in range(2))
    sinks = torch.randn(4, device=DEVICE, requires_grad=True)
    mask = torch.rand(2, 1, 5, 5, device=DEVICE) > 0.3
    mask[..., 0] = True
    torch.library.opcheck(mojo.attention.default, (q, k, v, None, None, 0.25, True, 0, 0.0, None, target))
    torch.library.opcheck(mojo.attention.default, (q, k, v, mask, None, 0.25, False, 0, 30.0, sinks, target))
    torch.library.opcheck(mojo.attention.default, (q, k, v, None, torch.tensor([2, 3, 4, 6, 9], device=DEVICE), 0.25,
                                                   True, 3, 0.0, None, target))


def test_bad_arguments_are_clear_errors():
    q, k = torch.randn(1, 3, 4, 8), torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match="grouped-query"):
        mojo.attention(q, k, k, mask=None, q_pos=None, scale=0.5, causal=True, target="torch")
    with pytest.raises(ValueError, match=r"must be \[B, H, S, D\]"):
        mojo.attention(q[0], k[0], k[0], mask=None, q_pos=None, scale=0.5, causal=True, target="torch")


@pytest.mark.parametrize("inner", ["eager"] + (["inductor"] if DEVICE == "cuda" else []))
def test_generate_with_static_cache_gives_eager_tokens(inner):
    """`generate` compiles its decode step with backend="mojo" (HF CompileConfig); the greedy tokens are eager's.
    The decode mask is a graph input (transformers 5.2x builds it outside the compiled step), kept as a bool
    tensor. With Inductor the kernels are inlined into its graph (the bool mask reaches them as bytes)."""
    from transformers import CompileConfig

    model = build("llama", "sdpa", torch.float32)
    prompt = torch.randint(3, 256, (1, 6), device=DEVICE)
    kwargs = dict(do_sample=False, max_new_tokens=8, min_new_tokens=8, cache_implementation="static", pad_token_id=0)
    reference = model.generate(prompt, disable_compile=True, **kwargs)
    config = CompileConfig(backend="mojo", fullgraph=False, mode=None, options={"inner_compiler": inner})
    config._compile_all_devices = True  # HF compiles the decode step on accelerators only by default
    tokens = model.generate(prompt, compile_config=config, **kwargs)
    assert torch.equal(tokens, reference)
    assert mojo_compile.last_report().counts()["mojo.attention"] == 2


def test_gpt_oss_sinks():
    """gpt-oss: attention sinks (a learned logit per head in the softmax) and alternating sliding / full layers."""
    cfg = transformers.GptOssConfig(vocab_size=256, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4,
                                    num_experts_per_tok=2, max_position_embeddings=256, sliding_window=5,
                                    pad_token_id=0)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").to(DEVICE).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("sinks"):
                p.normal_()  # away from their init, so a sink left out would show
    ids = torch.randint(3, 256, (2, 9), device=DEVICE)
    logits, grads = run(model, ids, "mojo", options={"inner_compiler": "eager"})
    sites = [s for s in mojo_compile.last_report().sites if s.op == "mojo.attention"]
    ref_logits, ref_grads = run(model, ids, "eager")
    assert [s.pattern for s in sites] == ["attention.sinks.repeat_kv.mask"] * 2
    assert [s.detail for s in sites] == ["mask: causal, window 5 (proven from the mask subgraph)",
                                          "mask: causal (proven from the mask subgraph)"]
    torch.testing.assert_close(logits, ref_logits, rtol=1e-5, atol=1e-5)  # fp32: summation order only
    for name, g in grads.items():
        torch.testing.assert_close(g, ref_grads[name], rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("family,attn,padded,expected", [
    ("llama", "eager", False, "causal"), ("mistral", "sdpa", False, "causal, window 5"),
    ("llama", "sdpa", True, "causal + key padding")])
def test_dynamic_shapes_prove_the_mask_symbolically(family, attn, padded, expected):
    """With a symbolic batch and sequence length the mask is no constant: its subgraph is evaluated as a formula of
    the indices (mask_algebra; a padded batch's attention_mask as a function of its own) and proven causal /
    sliding-window / causal + key padding for every size. Two shapes, one graph."""
    model = build(family, attn, torch.float32)
    compiled = torch.compile(model, backend="mojo", options={"inner_compiler": "eager"})
    with torch.no_grad():
        for batch, length in ((2, 9), (3, 14)):
            inputs = dict(input_ids=torch.randint(3, 256, (batch, length), device=DEVICE))
            if padded:
                inputs["attention_mask"] = torch.ones(batch, length, dtype=torch.long, device=DEVICE)
                inputs["attention_mask"][1, :3] = 0
            for t in inputs.values():
                torch._dynamo.mark_dynamic(t, 0)
                torch._dynamo.mark_dynamic(t, 1)
            out = compiled(**inputs, use_cache=False).logits
            ref = model(**inputs, use_cache=False).logits
            torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    report = mojo_compile.last_report()
    assert len(report.graphs) == 1
    assert [s.detail for s in report.sites if s.op == "mojo.attention"] == \
        [f"mask: {expected} (proven from the mask subgraph)"] * 2


def test_a_look_ahead_mask_is_not_proven_causal():
    """`j <= i + 1` over symbolic sizes: index arithmetic, but not causal -- the tensor stays."""
    def attend(q, k, v):
        n = q.shape[2]
        allowed = torch.arange(n, device=q.device)[None, :] <= torch.arange(n, device=q.device)[:, None] + 1
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed[None, None])

    q, k, v = (torch.randn(1, 2, 7, 8, device=DEVICE) for _ in range(3))
    for t in (q, k, v):
        torch._dynamo.mark_dynamic(t, 2)
    out = torch.compile(attend, backend="mojo", options={"inner_compiler": "eager"})(q, k, v)
    assert [s.detail for s in mojo_compile.last_report().sites] == ["mask: tensor"]
    torch.testing.assert_close(out, attend(q, k, v), rtol=1e-5, atol=1e-5)


def test_a_mask_that_does_not_broadcast_is_an_error():
    q, k = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 6, 8)
    with pytest.raises(ValueError, match="does not broadcast"):
        mojo.attention(q, k, k, mask=torch.ones(1, 1, 4, 5, dtype=torch.bool), q_pos=None, scale=0.5, causal=False,
                       target="torch")


@pytest.mark.skipif(DEVICE != "cuda", reason="torch's fused SDPA kernels run on CUDA")
@pytest.mark.parametrize("causal", [True, False])
def test_sdpa_kernels_compute_the_op(causal, caplog):
    """The ttx target's cuDNN / FlashAttention-2 candidates: the output is exactly what SDPA with that backend gives;
    the lse is the natural-log row log-sum-exp (absolute error <= 1e-3 against fp64: a log2 unit or a missing scale
    would be off by far more); the gradients, from torch's backward op of the same backend (not our fallback), are
    as accurate as our Triton kernel's (2x + bf16 roundoff); GQA 4."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from mojo_compile.lowering import attention_choice as choice

    torch.manual_seed(1)
    q = torch.randn(2, 8, 300, 128, device=DEVICE, dtype=torch.bfloat16)
    k, v = (torch.randn(2, 2, 300, 128, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
    dout = torch.randn_like(q)
    scale = 128 ** -0.5
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(q64, k64, v64, is_causal=causal, scale=scale, enable_gqa=True)
    ref_grads = torch.autograd.grad(ref, (q64, k64, v64), dout.double())
    scores = (q64 @ k64.repeat_interleave(4, 1).transpose(-1, -2)).detach() * scale
    if causal:
        scores = scores.masked_fill(torch.ones(300, 300, dtype=torch.bool, device=DEVICE).triu(1), float("-inf"))
    ref_lse = scores.logsumexp(-1)
    args = (q, k, v, None, None, scale, causal, 0, 0.0, None)
    assert set(choice.SDPA_KERNELS) <= set(choice.candidates(q, choice.sdpa_reason(*args) is None))
    flash_grads = choice.attn_kernels.attention_bwd(dout, q, k, v, *choice.run_forward("flash", *args), scale,
                                                 causal)[:3]
    backends = {"sdpa_cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa_flash": SDPBackend.FLASH_ATTENTION}
    lowering._LOGGED.clear()  # said once per process: a fallback must show here
    for name in choice.SDPA_KERNELS:
        out, lse = choice.run_forward(name, *args)
        with sdpa_kernel(backends[name]):
            expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=True)
        assert out.is_contiguous() and torch.equal(out, expected), name
        assert lse.shape == (2, 8, 300) and lse.dtype == torch.float32
        assert (lse.double() - ref_lse).abs().max().item() <= 1e-3, name
        grads = choice.sdpa_backward(name, dout, q, k, v, out, lse, scale, causal)
        assert "refused" not in caplog.text, caplog.text
        for g, g_flash, g_ref in zip(grads, flash_grads, ref_grads):
            assert g.is_contiguous() and g.shape == g_ref.shape
            bound = 2 * (g_flash.double() - g_ref).norm() + 2.0 ** -8 * g_ref.norm()
            assert (g.double() - g_ref).norm() <= bound, (name, (g.double() - g_ref).norm().item(), bound.item())


@pytest.mark.skipif(DEVICE == "cuda" or not KERNEL_TARGET_OK,
                    reason="the refusal comes from CPU tensors, which our kernels take under TRITON_INTERPRET=1 only")
def test_sdpa_kernels_fall_back_to_ours_when_torch_refuses(caplog):
    """Where torch's private SDPA ops refuse a call (here: CPU tensors, which they do not take), the ttx attention
    runs our Triton kernels instead, with the reason logged: the same (out, lse) and gradients as our kernels."""
    from mojo_compile.kernels import attention as kernels
    from mojo_compile.lowering import attention_choice as choice

    q = torch.randn(1, 4, 20, 16)
    k, v = (torch.randn(1, 2, 20, 16) for _ in range(2))
    dout = torch.randn_like(q)
    lowering._LOGGED.clear()  # said once per process: this test's refusals must show here
    out, lse = choice.sdpa_forward("sdpa_cudnn", q, k, v, 0.25, True)
    ref_out, ref_lse = kernels.attention_fwd(q, k, v, 0.25, causal=True)
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)
    grads = choice.sdpa_backward("sdpa_flash", dout, q, k, v, out, lse, 0.25, True)
    for g, ref in zip(grads, kernels.attention_bwd(dout, q, k, v, out, lse, 0.25, causal=True)[:3]):
        assert torch.equal(g, ref)
    assert "sdpa_cudnn forward refused" in caplog.text and "sdpa_flash backward refused" in caplog.text


# ------------------------------------------------------------------------------ repeat_kv left to the op's GQA
def hf_repeat_kv(x, n_rep):
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, n_rep, s, d).reshape(b, h * n_rep, s, d)


def repeated_kv_attention(q, k, v):
    return F.scaled_dot_product_attention(q, hf_repeat_kv(k, 2), hf_repeat_kv(v, 2), is_causal=True)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dynamic", [False, True])
def test_repeated_kv_reaches_the_op_unrepeated(dynamic, target):
    """Where the plain (MHA) pattern took k and v after repeat_kv (here: the repeat_kv patterns turned off, as a
    dynamic-shape graph whose sizes are graph inputs defeats their re-trace), the op still gets the kv heads:
    head i of repeat_kv(x, n) is x's head i // n, which is how the op groups heads. Values and gradients are
    eager's against fp64."""
    q = torch.randn(2, 4, 6, 8, device=DEVICE, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(2, 2, 6, 8, device=DEVICE, dtype=torch.float64, requires_grad=True) for _ in range(2))
    fn = torch.compile(repeated_kv_attention, backend="mojo", dynamic=dynamic, options={
        "inner_compiler": "eager", "target": target, "disable": ["attention.sdpa.repeat_kv*"]})
    inputs = [t.detach().float().requires_grad_() for t in (q, k, v)]
    out = fn(*inputs)
    ref = repeated_kv_attention(q, k, v)
    graph = mojo_compile.last_report().graphs[0]
    assert graph.counts()["mojo.attention"] == 1 and "aten.expand" not in graph.graph, graph.graph
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)  # fp32 against fp64
    grad = torch.randn_like(ref)
    out.backward(grad.float())
    ref.backward(grad)
    for got, want in zip(inputs, (q, k, v)):
        torch.testing.assert_close(got.grad.double(), want.grad, rtol=1e-4, atol=1e-5)  # fp32 sums of 2 heads


def cache_written_after_repeat(q, k, v, cache):
    ks, vs = hf_repeat_kv(cache, 2), hf_repeat_kv(v, 2)  # repeat_kv copies the cache here
    cache.mul_(2.0)  # then the cache changes: the attention must read the copy
    return F.scaled_dot_product_attention(q, ks, vs, is_causal=True)


@pytest.mark.parametrize("target", TARGETS)
def test_repeated_kv_of_a_cache_written_before_the_read_is_kept(target):
    q = torch.randn(1, 4, 5, 8, device=DEVICE)
    k, v, cache = (torch.randn(1, 2, 5, 8, device=DEVICE) for _ in range(3))
    fn = torch.compile(cache_written_after_repeat, backend="mojo", options={
        "inner_compiler": "eager", "target": target, "disable": ["attention.sdpa.repeat_kv*"]})
    got_cache, want_cache = cache.clone(), cache.clone()
    got = fn(q, k, v, got_cache)
    torch.testing.assert_close(got, cache_written_after_repeat(q, k, v, want_cache), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_cache, want_cache, rtol=0, atol=0)


def _static_cache_steps(model, forward, ids, attention_mask, steps):
    """HF's manual StaticCache loop (prefill, then one greedy token a step; attention_mask, cache_position and
    position_ids passed each call) for a left-padded batch: each call's last logits and its attention sites' mask
    details (a step that reuses a compiled graph reports none)."""
    batch, length = ids.shape
    cache = transformers.StaticCache(config=model.config, max_cache_len=16)
    positions = (attention_mask.cumsum(-1) - 1).clamp_min(0)
    logits, details, mask = [], [], attention_mask
    with torch.no_grad():
        out = forward(input_ids=ids, attention_mask=mask, past_key_values=cache,
                      cache_position=torch.arange(length, device=DEVICE), position_ids=positions)
        for step in range(steps + 1):
            logits.append(out.logits[:, -1])
            details.append([s.detail for s in mojo_compile.last_report().sites if s.op == "mojo.attention"])
            mojo_compile.reset_report()
            if step == steps:
                break
            mask = torch.cat([mask, torch.ones(batch, 1, dtype=mask.dtype, device=DEVICE)], 1)
            out = forward(input_ids=out.logits[:, -1:].argmax(-1), attention_mask=mask, past_key_values=cache,
                          cache_position=torch.tensor([length + step], device=DEVICE),
                          position_ids=positions[:, -1:] + 1 + step)
    return logits, details


def _left_padded_batch():
    ids = torch.randint(3, 256, (3, 7), device=DEVICE)
    attention_mask = torch.ones(3, 7, dtype=torch.long, device=DEVICE)
    attention_mask[1, :2] = 0
    attention_mask[2, :4] = 0
    return ids, attention_mask


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dynamic", [None, False], ids=["automatic", "static"])
def test_static_cache_prefill_and_decode_with_padding_are_causal_at_the_query_positions(dynamic, target):
    """A padded batch through a StaticCache of 16 slots. The prefill (7 queries, `j <= i & pad(attention_mask)[b, j]`
    over the whole cache) is causal at positions i + key padding; each decode step is causal at cache_position +
    key padding -- also under automatic dynamic shapes, where the decode step recompiles with symbolic sizes and the
    pad amount `16 - attention_mask.shape[-1]` is a size computed in the graph. Logits are eager's each step."""
    model = build("llama", "sdpa", torch.float32)
    ids, attention_mask = _left_padded_batch()
    compiled = torch.compile(model, backend="mojo", dynamic=dynamic,
                             options={"target": target, "inner_compiler": "eager"})
    got, details = _static_cache_steps(model, compiled, ids, attention_mask, steps=3)
    want, _ = _static_cache_steps(model, model, ids, attention_mask, steps=3)
    for step, (g, w) in enumerate(zip(got, want)):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5, msg=f"step {step}")  # fp32: summation order only
    proven = " (proven from the mask subgraph)"
    assert details[0] == [f"mask: causal at the query positions (i) + key padding{proven}"] * 2, details
    assert details[1] and all(d.startswith("mask: causal at the query positions from arg")
                              and d.endswith(f" + key padding{proven}") for d in details[1]), details
