from h import *
import sys, os
fams = {
 "mixtral": lambda: T.MixtralConfig(**C, num_local_experts=4, num_experts_per_tok=2, experts_implementation="eager"),
 "qwen3_moe": lambda: T.Qwen3MoeConfig(**C, head_dim=8, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        decoder_sparse_step=1, norm_topk_prob=True, experts_implementation="eager"),
 "deepseek_v3": lambda: T.DeepseekV3Config(**dict(C, num_key_value_heads=4), moe_intermediate_size=16, n_routed_experts=4,
        num_experts_per_tok=2, n_shared_experts=1, n_group=2, topk_group=1, first_k_dense_replace=1,
        kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8, experts_implementation="eager"),
 "phi3_longrope": lambda: T.Phi3Config(**dict(C, max_position_embeddings=64), original_max_position_embeddings=8,
        rope_scaling={"rope_type": "longrope", "short_factor": [1.0 + 0.1 * i for i in range(4)],
                      "long_factor": [2.0 + 0.3 * i for i in range(4)]}),
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
        import traceback; traceback.print_exc(limit=-4)
        print(n, "HARNESS FAIL", type(ex).__name__, str(ex)[:300])
