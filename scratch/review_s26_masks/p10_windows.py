"""Window 1, window == S, window S-1 on mistral / gemma3 (sdpa), left padding, torch and ttx."""
from h import *
import sys
torch.manual_seed(1)
S = 9
ids = torch.randint(3, 128, (3, S))
left = torch.ones(3, S, dtype=torch.long); left[1, :3] = 0; left[2, :6] = 0
for w in (1, 2, 8, 9):
    for fam in ("mistral", "gemma3"):
        for tgt in ("torch", "ttx"):
            model = build(fam, "sdpa", sliding_window=w)
            golden = copy.deepcopy(model).double()
            for name, am in (("nopad", None), ("left", left)):
                fresh()
                kw = dict(input_ids=ids, use_cache=False)
                if am is not None:
                    kw["attention_mask"] = am
                with torch.no_grad():
                    c = comp(model, tgt)(**kw).logits
                    s = sorted({d for _, d in att_sites()})
                    e = model(**kw).logits; d = golden(**kw).logits
                verdict(c, e, d, f"{fam} w={w} {tgt} {name} {s}")
