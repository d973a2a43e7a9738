"""HF llama StaticCache loop (the HF docs' manual decode with a compiled forward): which masks are proven, with and
without padding, dynamic None / False; numbers vs eager for each step."""
from h import *
import sys
pad = sys.argv[1] == "pad"; dyn = {"none": None, "false": False}[sys.argv[2]]
tgt = sys.argv[3] if len(sys.argv) > 3 else "torch"
model = build("llama", "sdpa")
torch.manual_seed(2)
B, S = 3, 7
ids = torch.randint(3, 128, (B, S))
am = torch.ones(B, S, dtype=torch.long)
if pad:
    am[1, :2] = 0; am[2, :4] = 0


def loop(m, report=False):
    cache = transformers.StaticCache(config=model.config, max_cache_len=16)
    outs, a = [], am.clone()
    pos = (am.cumsum(-1) - 1).clamp_min(0)
    with torch.no_grad():
        kw = dict(attention_mask=a) if pad else {}
        o = m(input_ids=ids, past_key_values=cache, cache_position=torch.arange(S), position_ids=pos, **kw)
        outs.append(o.logits[:, -1])
        if report: print("prefill", sorted(set(att_sites()))); mojo_compile.reset_report()
        for t in range(3):
            a = torch.cat([a, torch.ones(B, 1, dtype=a.dtype)], 1)
            kw = dict(attention_mask=a) if pad else {}
            o = m(input_ids=o.logits[:, -1:].argmax(-1), past_key_values=cache, cache_position=torch.tensor([S + t]),
                  position_ids=pos[:, -1:] + 1 + t, **kw)
            outs.append(o.logits[:, -1])
            if report: print("decode", t, sorted(set(att_sites()))); mojo_compile.reset_report()
    return outs


fresh()
c = loop(comp(model, tgt, dynamic=dyn), True)
e = loop(model)
for k, (x, y) in enumerate(zip(c, e)):
    print(k, "max|c-e|", (x - y).abs().max().item())
