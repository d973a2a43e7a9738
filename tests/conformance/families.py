"""The decoder families the conformance suite compiles: tiny random configs (2 layers, built offline from the config
class) and, per family, the Mojo ops the compiled graph must hold -- the fused-site table (README.md repeats it).

Sizes: hidden 64, 4 query heads of 16 over 2 kv heads (GQA), vocab 256, the 1-D weights (norms, biases) moved
off their init so a wrong weight shows. MoE families route 2 of 4 experts. Each family's expected table counts the
ops of one forward graph with the default attention ("sdpa" where the family allows it)."""
from __future__ import annotations

import torch

COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=512, pad_token_id=0, bos_token_id=1, eos_token_id=2)
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)


def _config(name: str, **extra):
    import transformers

    return getattr(transformers, name)(**{**COMMON, **extra})


# family -> (config factory, attention implementations it accepts)
FAMILIES = {
    "llama": (lambda: _config("LlamaConfig"), ("sdpa", "eager")),
    "mistral": (lambda: _config("MistralConfig", sliding_window=None), ("sdpa", "eager")),
    "mixtral": (lambda: _config("MixtralConfig", num_local_experts=4, num_experts_per_tok=2, sliding_window=None),
                ("sdpa", "eager")),
    "qwen2": (lambda: _config("Qwen2Config"), ("sdpa", "eager")),
    "qwen2_moe": (lambda: _config("Qwen2MoeConfig", **MOE, shared_expert_intermediate_size=64),
                  ("sdpa", "eager")),
    "qwen3": (lambda: _config("Qwen3Config", head_dim=16), ("sdpa", "eager")),
    "qwen3_moe": (lambda: _config("Qwen3MoeConfig", head_dim=16, **MOE), ("sdpa", "eager")),
    "gemma": (lambda: _config("GemmaConfig", head_dim=16, hidden_activation="gelu_pytorch_tanh"), ("sdpa", "eager")),
    "gemma2": (lambda: _config("Gemma2Config", head_dim=16, sliding_window=8), ("eager",)),
    "gemma3": (lambda: _config("Gemma3TextConfig", head_dim=16, sliding_window=8), ("sdpa", "eager")),
    "phi3": (lambda: _config("Phi3Config"), ("sdpa", "eager")),
    "olmo2": (lambda: _config("Olmo2Config"), ("sdpa", "eager")),
    "olmo3": (lambda: _config("Olmo3Config", sliding_window=8), ("sdpa", "eager")),
    "glm4": (lambda: _config("Glm4Config", head_dim=16), ("sdpa", "eager")),
    "granite": (lambda: _config("GraniteConfig"), ("sdpa", "eager")),
    "cohere": (lambda: _config("CohereConfig"), ("sdpa", "eager")),
    "stablelm": (lambda: _config("StableLmConfig"), ("sdpa", "eager")),
    "starcoder2": (lambda: _config("Starcoder2Config", sliding_window=None), ("sdpa", "eager")),
    "smollm3": (lambda: _config("SmolLM3Config"), ("sdpa", "eager")),
    "helium": (lambda: _config("HeliumConfig", head_dim=16), ("sdpa", "eager")),
    "exaone4": (lambda: _config("Exaone4Config", sliding_window=8), ("sdpa", "eager")),
    "ernie4_5": (lambda: _config("Ernie4_5Config", head_dim=16), ("sdpa", "eager")),
    "seed_oss": (lambda: _config("SeedOssConfig", head_dim=16, attention_dropout=0.0, residual_dropout=0.0),
                 ("sdpa", "eager")),  # its dropouts default to 0.1: the training case compares arithmetic
    "deepseek_v3": (lambda: _config("DeepseekV3Config", num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=32,
                                    qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, n_routed_experts=4,
                                    num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1,
                                    moe_intermediate_size=32, n_shared_experts=1),
                    ("sdpa",)),  # its eager attention fails in eager
    "gpt_oss": (lambda: _config("GptOssConfig", head_dim=16, num_local_experts=4, num_experts_per_tok=2,
                                sliding_window=8), ("eager",)),
}


# The Mojo ops of one forward graph (2 layers) without labels, per family and attention implementation (with labels
# the loss adds one mojo.cross_entropy: expected(..., labels=True)); "unfused" says what is left to Inductor and why
# (README.md, "What is fused, per family").
_PRE_NORM = {"mojo.rms_norm": 1, "mojo.add_rms_norm": 4}
_POST_NORM = {"mojo.rms_norm": 4, "mojo.add_rms_norm": 1}  # norm(branch) then add; the final norm takes the sum
_ATTN, _ROPE, _QK, _MLP = {"mojo.attention": 2}, {"mojo.rope": 2}, {"mojo.qk_norm_rope": 2}, {"mojo.gated_act": 2}
_FUSED_MLP = {"mojo.gated_act_fused": 2}
EXPECTED = {
    "llama": {**_PRE_NORM, **_ROPE, **_ATTN, **_MLP},
    "mistral": {**_PRE_NORM, **_ROPE, **_ATTN, **_MLP},
    "mixtral": {**_PRE_NORM, **_ROPE, **_ATTN, **_FUSED_MLP},  # experts: gate_up [E, 2I, H], chunk(2)
    "qwen2": {**_PRE_NORM, **_ROPE, **_ATTN, **_MLP},
    "qwen2_moe": {**_PRE_NORM, **_ROPE, **_ATTN, **_MLP, **_FUSED_MLP},  # shared expert + routed experts
    "qwen3": {**_PRE_NORM, **_QK, **_ATTN, **_MLP},
    "qwen3_moe": {**_PRE_NORM, **_QK, **_ATTN, **_FUSED_MLP},
    "gemma": {**_PRE_NORM, **_ROPE, **_ATTN, **_MLP},
    "gemma2": {"mojo.rms_norm": 5, "mojo.add_rms_norm": 4, **_ROPE, **_ATTN, **_MLP},  # sandwich norms
    "gemma3": {"mojo.rms_norm": 5, "mojo.add_rms_norm": 4, **_QK, **_ATTN, **_MLP},
    "phi3": {**_PRE_NORM, **_ROPE, **_ATTN, **_FUSED_MLP},
    "olmo2": {**_POST_NORM, **_QK, **_ATTN, **_MLP},
    "olmo3": {**_POST_NORM, **_QK, **_ATTN, **_MLP},
    "glm4": {"mojo.rms_norm": 5, "mojo.add_rms_norm": 4, **_ROPE, **_ATTN, **_FUSED_MLP},
    "granite": {**_PRE_NORM, **_ROPE, **_ATTN, **_MLP},
    "cohere": {"mojo.layer_norm": 3, **_ROPE, **_ATTN, **_MLP},  # its own LayerNorm (in fp32), parallel residual
    "stablelm": {"mojo.layer_norm": 1, "mojo.add_layer_norm": 4, **_ROPE, **_ATTN, **_MLP},  # LayerNorm
    "starcoder2": {"mojo.layer_norm": 1, "mojo.add_layer_norm": 4, **_ROPE, **_ATTN},  # LayerNorm, non-gated MLP
    "smollm3": {**_PRE_NORM, **_ROPE, **_ATTN, **_MLP},
    "helium": {**_PRE_NORM, **_ROPE, **_ATTN, **_MLP},
    "exaone4": {**_POST_NORM, **_QK, **_ATTN, **_MLP},
    "ernie4_5": {**_PRE_NORM, **_ROPE, **_ATTN, **_MLP},  # RoPE in fp32 models only (FP32_ONLY)
    "seed_oss": {**_PRE_NORM, **_ROPE, **_ATTN, **_MLP},
    "deepseek_v3": {"mojo.rms_norm": 5, "mojo.add_rms_norm": 4, **_ATTN, **_MLP, "mojo.gated_act_fused": 1},
    "gpt_oss": {**_PRE_NORM, **_ATTN},
}
# What fuses in fp32 models only: ERNIE-4.5 computes its R4b RoPE in fp32 between two casts, which an fp32 model
# has not (its casts are no-ops).
FP32_ONLY = {"ernie4_5": {"mojo.rope"}}
UNFUSED = {
    "ernie4_5": "RoPE in bf16 / fp16 models: R4b computed in fp32 between casts",
    "granite": "attention under attn_implementation='eager' (its attention_multiplier scale)",
    "starcoder2": "the non-gated MLP",
    "deepseek_v3": "RoPE: the de-interleaving output permutation (R5)",
    "gpt_oss": "RoPE: half-width cos with chunk (R8); the clamped SwiGLU of its experts",
}


# The families of the near misses the report gives (one per unfused site, naming the closest pattern and why):
# the UNFUSED spellings of a family we fuse elsewhere; non-gated MLPs are no family of ours (no tell-tale). Every
# other family: none.
NEAR_MISSES = {
    "ernie4_5": {"rope"}, "deepseek_v3": {"rope"},
    "gpt_oss": {"rope", "gated_act"},
}


def near_misses(family: str, attn: str, dtype: torch.dtype = torch.float32) -> set:
    if family == "granite" and attn == "eager":
        return {"attention"}
    if dtype == torch.float32 and family in FP32_ONLY:
        return NEAR_MISSES.get(family, set()) - {op.split(".")[1] for op in FP32_ONLY[family]}
    return NEAR_MISSES.get(family, set())


def expected(family: str, attn: str, labels: bool = False, dtype: torch.dtype = torch.float32) -> dict:
    """The Mojo ops of one forward graph of a model of `dtype`; with labels, also the loss (HF's ForCausalLMLoss,
    every family)."""
    table = dict(EXPECTED[family])
    if dtype != torch.float32:
        for op in FP32_ONLY.get(family, ()):
            table.pop(op)
    if family == "granite" and attn == "eager":
        table.pop("mojo.attention")
    if labels:
        table["mojo.cross_entropy"] = 1
    return table


def build(family: str, dtype: torch.dtype, attn: str, device: str):
    import transformers

    factory, _ = FAMILIES[family]
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(factory(), attn_implementation=attn)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model.to(device, dtype).eval()
