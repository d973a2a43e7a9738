from h import *
import sys
from p2 import fams
from p4 import fams as f4; fams.update(f4)
n = sys.argv[1]; mode = sys.argv[2]
m = build(fams[n]()).eval()
ids, am, labels = inputs()
torch._dynamo.reset(); mojo_compile.reset_report()
cm = torch.compile(m, backend="mojo", options={"target": "torch", "inner_compiler": "eager"})
if mode == "am_grad": out = cm(input_ids=ids, attention_mask=am, labels=labels)
if mode == "grad": out = cm(input_ids=ids, labels=labels)
if mode == "am_nograd":
    with torch.no_grad(): out = cm(input_ids=ids, attention_mask=am, labels=labels)
rep = mojo_compile.last_report()
print(mode, rep.counts())
for g in rep.graphs:
    for note in g.notes: print("NOTE", note)
    for nm in getattr(g, "near_misses", []): print("NM", nm)
for s in rep.sites: print("SITE", s.source, s.op, getattr(s, "detail", ""))
