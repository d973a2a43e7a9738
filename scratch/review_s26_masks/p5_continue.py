"""Prefill 7, then a 3-token continuation and 1-token decodes on a DynamicCache (sliding window 4 < kv length)."""
import sys
from h import *
fam, attn = sys.argv[1], sys.argv[2]
tgt = sys.argv[3] if len(sys.argv) > 3 else "torch"
pad = sys.argv[4] if len(sys.argv) > 4 else "none"
dyn = {"none": None, "true": True, "false": False}[sys.argv[5] if len(sys.argv) > 5 else "none"]
torch.manual_seed(3)
B = 2
ids = torch.randint(3, 128, (B, 12))
am = torch.ones(B, 12, dtype=torch.long)
if pad == "left":
    am[1, :3] = 0


def loop(m, dtype):
    cache = transformers.DynamicCache(config=m.config if not hasattr(m, "_orig_mod") else m._orig_mod.config)
    outs = []
    with torch.no_grad():
        for lo, hi in ((0, 7), (7, 10), (10, 11), (11, 12)):
            kw = dict(input_ids=ids[:, lo:hi], past_key_values=cache, use_cache=True)
            if pad != "none":
                kw["attention_mask"] = am[:, :hi]
            outs.append(m(**kw).logits)
    return outs


model = build(fam, attn)
golden = copy.deepcopy(model).double()
fresh()
c = loop(comp(model, tgt, dynamic=dyn), None)
sites = att_sites()
e = loop(model, None)
d = loop(golden, None)
for k, (x, y, z) in enumerate(zip(c, e, d)):
    verdict(x, y, z, f"{fam}/{attn}/{tgt}/{pad}/dyn={dyn} chunk {k}")
for s in sorted(set(sites)):
    print("    ", s)
