"""A user's manual decode loop on a tiny Llama / Mistral: left padding, batch 2, compiled forward (backend mojo)."""
import sys
from h import *
import transformers

fam = sys.argv[1] if len(sys.argv) > 1 else "llama"
cache_kind = sys.argv[2] if len(sys.argv) > 2 else "dynamic"
dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[sys.argv[3] if len(sys.argv) > 3 else "fp32"]
dyn = (sys.argv[4] == "dyn") if len(sys.argv) > 4 else None
Cfg = {"llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig, "qwen3": transformers.Qwen3Config}[fam]
kw = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
          num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2)
if fam == "mistral":
    kw["sliding_window"] = 5
torch.manual_seed(0)
model = transformers.AutoModelForCausalLM.from_config(Cfg(**kw), attn_implementation="sdpa").to(dtype).eval()
ids = torch.randint(3, 256, (2, 7))
am = torch.ones(2, 7, dtype=torch.long); am[1, :3] = 0
cmodel = comp(model, dynamic=dyn)


def loop(m, steps=5):
    if cache_kind == "static":
        cache = transformers.StaticCache(config=model.config, max_cache_len=16)
    else:
        cache = transformers.DynamicCache(config=model.config)
    outs = []
    a = am.clone()
    pos = am.long().cumsum(-1) - 1; pos.masked_fill_(am == 0, 1)
    with torch.no_grad():
        o = m(input_ids=ids, attention_mask=a, past_key_values=cache, cache_position=torch.arange(7), position_ids=pos, use_cache=True)
        outs.append(o.logits[:, -1])
        tok = o.logits[:, -1].argmax(-1, keepdim=True)
        for t in range(steps):
            a = torch.cat([a, torch.ones(2, 1, dtype=a.dtype)], 1)
            p = (a.sum(-1, keepdim=True) - 1)
            o = m(input_ids=tok, attention_mask=a, past_key_values=cache, cache_position=torch.tensor([7 + t]), position_ids=p, use_cache=True)
            outs.append(o.logits[:, -1])
            tok = o.logits[:, -1].argmax(-1, keepdim=True)
    return outs

torch._dynamo.reset(); mojo_compile.reset_report()
e = loop(model)
c = loop(cmodel)
ref_model = model.double()
model_d = ref_model
# fp64 reference
d = loop(model_d)
model.to(dtype)
for i, (x, y, z) in enumerate(zip(c, e, d)):
    print(i, "compiled", rel(x, z), "eager", rel(y, z))
rep = mojo_compile.last_report()
print(rep.counts())
print(sorted({s.detail for s in rep.sites if s.op == "mojo.attention"}))
