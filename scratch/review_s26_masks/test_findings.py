"""Confirmed findings of review s26 (attention masks as HF families build them). Each test asserts the correct
behaviour and fails on the code reviewed (tree 25635b0)."""
from conftest import DEVICE, TARGETS, mojo_options  # first: sets TRITON_INTERPRET, MOJO_CACHE_DIR

import pytest
import torch
import torch.nn.functional as F

import mojo_compile

S = 6


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()
    mojo_compile.reset_report()
    yield
    torch._dynamo.reset()


def causal_or_sometimes_bidirectional(q, k, v):
    """Prefix-LM style: one coin per call decides whether this step attends bidirectionally."""
    i = torch.arange(S, device=q.device)
    causal = i[None, :] <= i[:, None]
    bidirectional = torch.bernoulli(torch.full((), 0.5, device=q.device)).bool()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal | bidirectional)


def causal_or_sometimes_bidirectional_rand(q, k, v):
    i = torch.arange(S, device=q.device)
    causal = i[None, :] <= i[:, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal | (torch.rand((), device=q.device) < 0.5))


@pytest.mark.parametrize("fn", [causal_or_sometimes_bidirectional, causal_or_sometimes_bidirectional_rand],
                         ids=["bernoulli", "rand"])
@pytest.mark.parametrize("target", TARGETS)
def test_a_mask_drawn_at_random_is_drawn_at_every_call(fn, target):
    """Finding 1 (wrong number): a mask whose subgraph has a random op (rand / bernoulli: depends on no runtime
    input, static sizes) is run once at compile time by mask_analysis.evaluate_constant and its draw classified
    (causal or none) for good. Eager draws again at every call; with the same seed the compiled call must too."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, S, 8, device=DEVICE) for _ in range(3))
    compiled = torch.compile(fn, backend="mojo", options=mojo_options(target))
    draws = set()
    for seed in range(10):
        torch.manual_seed(100 + seed)
        expected = fn(q, k, v)
        torch.manual_seed(100 + seed)
        draws.add(bool(torch.bernoulli(torch.full((), 0.5)).item()) if fn is causal_or_sometimes_bidirectional
                  else bool(torch.rand(()).item() < 0.5))
        torch.manual_seed(100 + seed)
        got = compiled(q, k, v)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, msg=f"seed {100 + seed}")
    assert draws == {False, True}  # (the seeds give both masks, so a mask fixed at compile time shows)


def _tiny_llama():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                   pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    return transformers, model.to(DEVICE).eval()


def _static_cache_loop(transformers, model, forward, ids, attention_mask, steps=2):
    """The HF docs' manual StaticCache decode (prefill, then one token a step) with a left-padded batch: per call,
    the last logits and the attention sites' mask details."""
    batch, length = ids.shape
    cache = transformers.StaticCache(config=model.config, max_cache_len=16)
    positions = (attention_mask.cumsum(-1) - 1).clamp_min(0)
    outs, details, mask = [], [], attention_mask
    with torch.no_grad():
        out = forward(input_ids=ids, attention_mask=mask, past_key_values=cache,
                      cache_position=torch.arange(length, device=DEVICE), position_ids=positions)
        for step in range(steps + 1):
            outs.append(out.logits[:, -1])
            details.append([s.detail for s in mojo_compile.last_report().sites if s.op == "mojo.attention"])
            mojo_compile.reset_report()
            if step == steps:
                break
            mask = torch.cat([mask, torch.ones(batch, 1, dtype=mask.dtype, device=DEVICE)], 1)
            out = forward(input_ids=out.logits[:, -1:].argmax(-1), attention_mask=mask, past_key_values=cache,
                          cache_position=torch.tensor([length + step], device=DEVICE),
                          position_ids=positions[:, -1:] + 1 + step)
    return outs, details


def _left_padded_prompt():
    torch.manual_seed(2)
    ids = torch.randint(3, 128, (3, 7), device=DEVICE)
    attention_mask = torch.ones(3, 7, dtype=torch.long, device=DEVICE)
    attention_mask[1, :2] = 0
    attention_mask[2, :4] = 0
    return ids, attention_mask


def test_static_cache_decode_mask_is_proven_under_automatic_dynamic_shapes():
    """Finding 2 (missed fusion): with the default dynamic=None, the decode steps recompile with symbolic sizes, and
    the mask's `F.pad(attention_mask, (0, max_cache_len - width))` reads a SymInt computed in the graph
    (`operator.sub` of sizes), which mask_algebra.evaluate visits as a node without a rule: the whole mask stays a
    [B, 1, 1, 16] tensor. With dynamic=False the same steps are proven 'causal at the query positions + key
    padding'."""
    transformers, model = _tiny_llama()
    ids, attention_mask = _left_padded_prompt()
    compiled = torch.compile(model, backend="mojo", options=mojo_options("torch"))
    outs, details = _static_cache_loop(transformers, model, compiled, ids, attention_mask)
    expected, _ = _static_cache_loop(transformers, model, model, ids, attention_mask)
    for got, want in zip(outs, expected):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    decode = details[1]  # (the first decode step's compile; later steps reuse its graph and report nothing)
    assert decode and all(d.startswith("mask: causal at the query positions") and "key padding" in d
                          for d in decode), details


def test_static_cache_prefill_mask_with_padding_is_proven():
    """Finding 3 (missed fusion): the prefill into a StaticCache builds `j <= i & attention_mask[b, j]` over the
    whole cache (Sq 7 < Skv 16, top-left aligned, positions an arange and no runtime tensor).
    mask_algebra.structure proves index-only masks only for Sq == Skv, so the mask stays a tensor and the prefill
    reads all 16 cache slots, although it is causal at the query positions arange(Sq)."""
    transformers, model = _tiny_llama()
    ids, attention_mask = _left_padded_prompt()
    compiled = torch.compile(model, backend="mojo", options=mojo_options("torch"), dynamic=False)
    outs, details = _static_cache_loop(transformers, model, compiled, ids, attention_mask, steps=0)
    expected, _ = _static_cache_loop(transformers, model, model, ids, attention_mask, steps=0)
    torch.testing.assert_close(outs[0], expected[0], rtol=1e-5, atol=1e-5)
    assert details[0] and all("tensor" not in d and "key padding" in d for d in details[0]), details
