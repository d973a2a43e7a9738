"""generate() with a compiled forward (backend mojo) vs eager vs fp64: tokens and per-step logits."""
import sys
from h import *
fam, attn, cache = sys.argv[1], sys.argv[2], sys.argv[3]
tgt = sys.argv[4] if len(sys.argv) > 4 else "torch"
inner = sys.argv[5] if len(sys.argv) > 5 else "eager"
pad_side = sys.argv[6] if len(sys.argv) > 6 else "left"
steps = 6
torch.manual_seed(2)
B, S = 3, 7
ids = torch.randint(3, 128, (B, S))
am = torch.ones(B, S, dtype=torch.long)
if pad_side == "left":
    am[1, :2] = 0; am[2, :4] = 0
else:
    am[1, -2:] = 0; am[2, -4:] = 0
ids = ids.masked_fill(am == 0, 0)


def gen(model, compiled=False):
    if compiled:
        model.forward = comp(model.forward, tgt, inner)
    kw = dict(do_sample=False, max_new_tokens=steps, min_new_tokens=steps, pad_token_id=0, output_logits=True,
              return_dict_in_generate=True, disable_compile=True)
    if cache == "static":
        kw["cache_implementation"] = "static"
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=am.clone(), **kw)
    return out.sequences, torch.stack(out.logits)


model = build(fam, attn)
golden = copy.deepcopy(model).double()
cm = copy.deepcopy(model)
fresh()
cs, cl = gen(cm, True)
sites = att_sites()
es, el = gen(model)
ds, dl = gen(golden)
print("tokens compiled==eager", torch.equal(cs, es), "eager==fp64", torch.equal(es, ds))
print(cs[:, S:].tolist()); print(es[:, S:].tolist())
for t in range(steps):
    if not torch.equal(cs[:, :S + t], es[:, :S + t]):
        break
    if not torch.equal(es[:, :S + t], ds[:, :S + t]):
        break
    verdict(cl[t], el[t], dl[t], f"{fam}/{attn}/{cache}/{tgt}/{inner}/{pad_side} step {t}")
for s in sorted(set(sites)):
    print("    ", s)
