"""Sliding-window families, prefill, left/right padding, window 4 < seq 9."""
import sys
from h import *
fams = sys.argv[1].split(",")
attns = sys.argv[2].split(",") if len(sys.argv) > 2 else ["sdpa", "eager"]
targets = sys.argv[3].split(",") if len(sys.argv) > 3 else ["torch"]
torch.manual_seed(1)
S = 9
ids = torch.randint(3, 128, (3, S))
left = torch.ones(3, S, dtype=torch.long); left[1, :3] = 0; left[2, :6] = 0
right = torch.ones(3, S, dtype=torch.long); right[1, -3:] = 0; right[2, -6:] = 0
for fam in fams:
    for attn in attns:
        if fam in ("gemma2", "gpt_oss") and attn == "sdpa":
            continue
        for tgt in targets:
            for name, am in (("nopad", None), ("left", left), ("right", right)):
                try:
                    forward_case(fam, attn, am, ids, tgt, label=name)
                except Exception as ex:
                    import traceback; traceback.print_exc()
                    print("CRASH", fam, attn, tgt, name, repr(ex)[:300])
