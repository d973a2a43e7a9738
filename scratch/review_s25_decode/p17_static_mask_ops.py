"""Why a tiny Llama's StaticCache prefill mask (batch 2, left padding) stays a tensor: the ops of its subgraph."""
import os
from h import *
import transformers
import mojo_compile.patterns.mask_algebra as ma

seen = set()
orig = ma.evaluate


def spy(mask, reader=None, writes=None):
    stack, nodes = [mask], []
    while stack:
        n = stack.pop()
        if n in nodes:
            continue
        nodes.append(n)
        stack.extend(n.all_input_nodes)
    missing = sorted({str(n.target) for n in nodes if n.op == "call_function" and n.target not in ma.RULES})
    r = orig(mask, reader, writes)
    print("formula:", None if r is None else "ok", "ops without a rule:", missing)
    return r


ma.evaluate = spy
import mojo_compile.patterns.mask_analysis as man
man.mask_algebra.evaluate = spy
cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()
ids = torch.randint(3, 256, (2, 7)); am = torch.ones(2, 7, dtype=torch.long); am[1, :3] = 0
cache = transformers.StaticCache(config=cfg, max_cache_len=16)
with torch.no_grad():
    comp(model)(input_ids=ids, attention_mask=am, past_key_values=cache, cache_position=torch.arange(7))
print(sites())
