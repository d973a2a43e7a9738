"""Gemma2 (eager, softcap) under dynamic=True: why no attention site."""
from h import *
import logging, sys
model = build("gemma2", "eager", **({} if len(sys.argv) < 2 else {"attn_logit_softcapping": None}))
fresh()
torch.manual_seed(9)
ids = torch.randint(3, 128, (3, 9))
with torch.no_grad():
    comp(model, "torch", dynamic=True)(input_ids=ids, use_cache=False)
r = mojo_compile.last_report()
print(r.counts())
for line in str(r).splitlines():
    if "attention" in line.lower() or "softcap" in line.lower() or "refus" in line.lower():
        print(line[:300])
