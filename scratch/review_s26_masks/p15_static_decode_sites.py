"""Which mask a StaticCache decode step (HF, compiled forward) is proven to have, llama and gemma3, batch 3 left pad."""
from h import *
import sys
fam = sys.argv[1]
model = build(fam, "sdpa")
torch.manual_seed(2)
B, S = 3, 7
ids = torch.randint(3, 128, (B, S))
am = torch.ones(B, S, dtype=torch.long); am[1, :2] = 0; am[2, :4] = 0
cache = transformers.StaticCache(config=model.config, max_cache_len=16)
f = comp(model)
fresh()
with torch.no_grad():
    pos = (am.cumsum(-1) - 1).clamp_min(0)
    o = f(input_ids=ids, attention_mask=am, past_key_values=cache, cache_position=torch.arange(S), position_ids=pos)
    print("prefill", att_sites())
    a = torch.cat([am, torch.ones(B, 1, dtype=am.dtype)], 1)
    mojo_compile.reset_report()
    o = f(input_ids=o.logits[:, -1:].argmax(-1), attention_mask=a, past_key_values=cache,
          cache_position=torch.tensor([S]), position_ids=pos[:, -1:] + 1)
    print("decode", att_sites())
