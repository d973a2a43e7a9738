import sys
from h import *
fam = sys.argv[1]; attn = sys.argv[2]; tgt = sys.argv[3] if len(sys.argv) > 3 else "torch"
torch.manual_seed(1)
S = 9
ids = torch.randint(3, 128, (3, S))
left = torch.ones(3, S, dtype=torch.long); left[1, :3] = 0; left[2, :6] = 0
right = torch.ones(3, S, dtype=torch.long); right[1, -3:] = 0; right[2, -6:] = 0
for name, am in (("nopad", None), ("left", left), ("right", right)):
    try:
        forward_case(fam, attn, am, ids, tgt, label=name)
    except Exception as ex:
        import traceback; traceback.print_exc()
        print("CRASH", fam, attn, tgt, name, repr(ex)[:300])
