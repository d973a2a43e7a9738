"""Packed sequences (position_ids restarting, no attention_mask) and custom 4-D masks."""
import sys
from h import *
fams = sys.argv[1].split(","); attns = sys.argv[2].split(","); tgt = sys.argv[3] if len(sys.argv) > 3 else "torch"
torch.manual_seed(1)
S = 9
ids = torch.randint(3, 128, (2, S))
pos = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3], [0, 1, 2, 0, 1, 2, 3, 4, 5]])
i = torch.arange(S)
causal = (i[None, :] <= i[:, None])
block = torch.tensor([[0]*5 + [1]*4, [0]*3 + [1]*6])
bool4 = (causal[None] & (block[:, :, None] == block[:, None, :]))[:, None]
float4 = torch.zeros(2, 1, S, S).masked_fill(~bool4, torch.finfo(torch.float32).min)
for fam in fams:
    for attn in attns:
        for name, kw in (("packed", dict(position_ids=pos)),
                         ("arange_pos", dict(position_ids=torch.arange(S)[None].expand(2, S))),
                         ("bool4d", dict(attention_mask=bool4)), ("float4d", dict(attention_mask=float4))):
            if attn == "eager" and name == "bool4d":
                continue
            try:
                forward_case(fam, attn, None, ids, tgt, label=name, **kw)
            except Exception as ex:
                import traceback; traceback.print_exc()
                print("CRASH", fam, attn, tgt, name, repr(ex)[:300])
