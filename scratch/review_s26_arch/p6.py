"""Frozen base + hand-made LoRA adapters on chosen projections."""
from h import *
import sys, os
from torch import nn


class LoRA(nn.Module):
    def __init__(self, base, r=4):
        super().__init__()
        self.base = base
        self.A = nn.Parameter(torch.randn(r, base.in_features) * 0.1)
        self.B = nn.Parameter(torch.randn(base.out_features, r) * 0.1)

    def forward(self, x):
        return self.base(x) + (x @ self.A.T) @ self.B.T * 0.5


def lora_model(cfg, targets, extra_trainable=()):
    def make():
        m = build(cfg)
        for p in m.parameters():
            p.requires_grad_(False)
        torch.manual_seed(5)
        for name, mod in list(m.named_modules()):
            for t in targets:
                if name.endswith(t) and isinstance(mod, nn.Linear):
                    parent = m.get_submodule(name.rsplit(".", 1)[0])
                    setattr(parent, name.rsplit(".", 1)[1], LoRA(mod))
        for n, p in m.named_parameters():
            if any(e in n for e in extra_trainable):
                p.requires_grad_(True)
        return m
    return make


cases = {
 "llama_q": (lambda: T.LlamaConfig(**C), ["q_proj"], ()),
 "llama_qv": (lambda: T.LlamaConfig(**C), ["q_proj", "v_proj"], ()),
 "llama_k": (lambda: T.LlamaConfig(**C), ["k_proj"], ()),
 "llama_gate": (lambda: T.LlamaConfig(**C), ["gate_proj"], ()),
 "llama_up": (lambda: T.LlamaConfig(**C), ["up_proj"], ()),
 "llama_down_norms": (lambda: T.LlamaConfig(**C), ["down_proj"], ("norm",)),
 "llama_embed_only": (lambda: T.LlamaConfig(**C), [], ("embed_tokens",)),
 "llama_lmhead_only": (lambda: T.LlamaConfig(**C, tie_word_embeddings=False), [], ("lm_head",)),
 "qwen3_q": (lambda: T.Qwen3Config(**C, head_dim=8), ["q_proj"], ()),
 "qwen3_knorm": (lambda: T.Qwen3Config(**C, head_dim=8), [], ("k_norm",)),
 "phi3_qkv": (lambda: T.Phi3Config(**C), ["qkv_proj"], ()),
 "phi3_gateup": (lambda: T.Phi3Config(**C), ["gate_up_proj"], ()),
 "gpt_neox_dense": (lambda: T.GPTNeoXConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
     num_attention_heads=4), ["dense"], ()),
 "gemma3_k": (lambda: T.Gemma3TextConfig(**C, head_dim=8), ["k_proj"], ()),
}
tg = tuple(os.environ.get('TGTS','torch,ttx').split(','))
for n in (sys.argv[1:] or cases):
    cf, targets, extra = cases[n]
    try:
        check(n, None, targets=tg, model_fn=lora_model(cf(), targets, extra))
    except Exception as ex:
        import traceback; traceback.print_exc(limit=-4); print(n, "HARNESS FAIL", ex)
