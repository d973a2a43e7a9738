from h import *
import sys
from p2 import fams
n = sys.argv[1]
m = build(fams[n]()).eval()
ids, am, labels = inputs()
torch._dynamo.reset(); mojo_compile.reset_report()
with torch.no_grad():
    torch.compile(m, backend="mojo", options={"target": "torch", "inner_compiler": "eager"})(input_ids=ids, attention_mask=am)
rep = mojo_compile.last_report()
print(rep.counts())
for g in rep.graphs:
    for note in g.notes: print("NOTE", note)
