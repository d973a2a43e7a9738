"""Training through sliding + full layers with left/right padding: logits and every gradient vs eager vs fp64."""
from h import *
import sys
fam, tgt = sys.argv[1], sys.argv[2]
inner = sys.argv[3] if len(sys.argv) > 3 else "eager"
torch.manual_seed(1)
S = 9
ids = torch.randint(3, 128, (3, S))
am = torch.ones(3, S, dtype=torch.long); am[1, :3] = 0; am[2, -4:] = 0


def run(m, compiled):
    fresh()
    f = comp(m, tgt, inner) if compiled else m
    out = f(input_ids=ids, attention_mask=am, use_cache=False).logits
    loss = (out * am[..., None]).square().mean()
    loss.backward()
    g = {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
    m.zero_grad()
    return out.detach(), g, (att_sites() if compiled else None)


model = build(fam, "sdpa").train()
golden = copy.deepcopy(model).double()
c, cg, s = run(model, True)
e, eg, _ = run(model, False)
d, dg, _ = run(golden, False)
m = am.bool()[..., None]
bad = verdict(c * m, e * m, d * m, f"{fam} {tgt} {inner} logits")
for n in cg:
    rc, re_ = rel(cg[n], dg[n]), rel(eg[n], dg[n])
    if rc > 2 * re_ + 1e-6:
        print("BAD grad", n, rc, re_)
print(sorted(set(s)))
