"""Probe helpers: tiny HF models compiled with backend mojo vs eager vs an fp64 copy."""
import copy
import os
import sys
sys.path[:0] = ["/work/main/tests", "/work/main"]
os.environ.setdefault("MOJO_CACHE_DIR", "/tmp/masks_cache")
import conftest  # noqa: F401,E402  (TRITON_INTERPRET before mojo_compile)
import torch  # noqa: E402
import transformers  # noqa: E402
import mojo_compile  # noqa: E402

COMMON = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def cfg(family, **over):
    c = dict(COMMON)
    extra = {
        "mistral": dict(sliding_window=4),
        "gemma2": dict(head_dim=8, sliding_window=4, query_pre_attn_scalar=8, attn_logit_softcapping=5.0),
        "gemma3": dict(head_dim=8, sliding_window=4, query_pre_attn_scalar=8,
                       layer_types=["sliding_attention", "full_attention"]),
        "cohere2": dict(sliding_window=4, layer_types=["sliding_attention", "full_attention"]),
        "qwen2": dict(use_sliding_window=True, sliding_window=4, max_window_layers=1),
        "starcoder2": dict(sliding_window=4),
        "gpt_oss": dict(head_dim=8, sliding_window=4, num_local_experts=4, num_experts_per_tok=2,
                        intermediate_size=32),
        "llama4": dict(attention_chunk_size=4, head_dim=8, num_local_experts=2, intermediate_size_mlp=64,
                       no_rope_layers=[1, 0], moe_layers=[]),
        "llama": dict(),
    }[family]
    c.update(extra)
    c.update(over)
    Cfg = {"mistral": transformers.MistralConfig, "gemma2": transformers.Gemma2Config,
           "gemma3": transformers.Gemma3TextConfig, "cohere2": transformers.Cohere2Config,
           "qwen2": transformers.Qwen2Config, "starcoder2": transformers.Starcoder2Config,
           "gpt_oss": transformers.GptOssConfig, "llama4": transformers.Llama4TextConfig,
           "llama": transformers.LlamaConfig}[family]
    return Cfg(**c)


def build(family, attn="sdpa", dtype=torch.float32, **over):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg(family, **over), attn_implementation=attn)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.3 * torch.randn_like(p))
    return model.to(dtype).eval()


def comp(fn, target="torch", inner="eager", **kw):
    return torch.compile(fn, backend="mojo", options={"target": target, "inner_compiler": inner}, **kw)


def att_sites():
    return [(s.pattern, s.detail) for s in mojo_compile.last_report().sites if s.op == "mojo.attention"]


def rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    na, nb = a.isnan(), b.isnan()
    if not torch.equal(na, nb):
        return float("inf")
    a, b = a[~na], b[~nb]
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def verdict(c, e, d, label=""):
    rc, re_ = rel(c, d), rel(e, d)
    bad = rc > 2 * re_ + 1e-6
    print(f"{'BAD ' if bad else 'ok  '}{label} compiled {rc:.3g} eager {re_:.3g} max|c-e| "
          f"{(c.double() - e.double()).abs().nan_to_num(0).max().item():.3g}")
    return bad


def fresh():
    torch._dynamo.reset()
    mojo_compile.reset_report()


def forward_case(family, attn, am, ids, target="torch", inner="eager", label="", dynamic=None, **kw):
    """compiled vs eager vs fp64 of model(input_ids, attention_mask, **kw).logits"""
    model = build(family, attn)
    golden = copy.deepcopy(model).double()
    args = dict(input_ids=ids, use_cache=False, **kw)
    if am is not None:
        args["attention_mask"] = am
    am0 = am.clone() if am is not None else None
    fresh()
    with torch.no_grad():
        c = comp(model, target, inner, dynamic=dynamic)(**args).logits
        sites = att_sites()
        e = model(**args).logits
        try:
            d = golden(**args).logits
        except RuntimeError:  # (grouped_mm has no fp64)
            d = e.double()
    if am is not None:
        assert torch.equal(am, am0), "attention_mask mutated"
    bad = verdict(c, e, d, f"{family}/{attn}/{target}/{inner} {label}")
    for s in sites:
        print("    ", s)
    return bad, c, e, d
