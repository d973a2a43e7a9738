from h import *
import sys
M = dict(C); 
fams = {
 "falcon": lambda: T.FalconConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_kv_heads=2, new_decoder_architecture=True, parallel_attn=True, bias=True, pad_token_id=0),
 "falcon_old": lambda: T.FalconConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        multi_query=True, new_decoder_architecture=False, parallel_attn=True, bias=False, pad_token_id=0),
 "glm4": lambda: T.Glm4Config(**C, head_dim=8, partial_rotary_factor=0.5),
 "glm": lambda: T.GlmConfig(**C, head_dim=8, partial_rotary_factor=0.5),
 "mixtral": lambda: T.MixtralConfig(**C, num_local_experts=4, num_experts_per_tok=2),
 "qwen3_moe": lambda: T.Qwen3MoeConfig(**C, head_dim=8, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        decoder_sparse_step=1, norm_topk_prob=True),
 "smollm3": lambda: T.SmolLM3Config(**C, no_rope_layer_interval=2),
 "exaone4": lambda: T.Exaone4Config(**C),
 "olmo3": lambda: T.Olmo3Config(**C),
 "granite": lambda: T.GraniteConfig(**C, logits_scaling=3.0, embedding_multiplier=2.0, residual_multiplier=0.5,
        attention_multiplier=0.25),
 "llama3rope": lambda: T.LlamaConfig(**C, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 16}),
 "gemma3": lambda: T.Gemma3TextConfig(**C, head_dim=8, sliding_window=4, layer_types=["sliding_attention", "full_attention"]),
 "cohere": lambda: T.CohereConfig(**C, logit_scale=0.375, use_qk_norm=True),
 "cohere_noqk": lambda: T.CohereConfig(**C, logit_scale=0.375),
}
if __name__ == "__main__":
  for n in (sys.argv[1:] or fams):
    try:
        cfg = fams[n]()
    except Exception as ex:
        print(n, "CONFIG FAIL", ex); continue
    try:
        check(n, cfg, targets=tuple(os.environ.get('TGTS','torch,ttx').split(',')))
    except Exception as ex:
        print(n, "HARNESS FAIL", type(ex).__name__, str(ex)[:300])
