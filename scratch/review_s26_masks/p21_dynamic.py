"""dynamic=True prefill, two lengths (9 then 11), left/right padding, sliding + full layers."""
from h import *
import sys
fam, attn, tgt = sys.argv[1], sys.argv[2], sys.argv[3]
model = build(fam, attn)
golden = copy.deepcopy(model).double()
fresh()
f = comp(model, tgt, dynamic=True)
for S in (9, 11):
    torch.manual_seed(S)
    ids = torch.randint(3, 128, (3, S))
    am = torch.ones(3, S, dtype=torch.long); am[1, :3] = 0; am[2, -5:] = 0
    mojo_compile.reset_report()
    with torch.no_grad():
        c = f(input_ids=ids, attention_mask=am, use_cache=False).logits
        s = sorted({d for _, d in att_sites()})
        e = model(input_ids=ids, attention_mask=am, use_cache=False).logits
        d = golden(input_ids=ids, attention_mask=am, use_cache=False).logits
    verdict(c, e, d, f"{fam} {attn} {tgt} S={S} {s}")
