"""Gemma2 eager under dynamic=True: the graph's scalar inputs and the ops around softmax."""
from h import *
model = build("gemma2", "eager")
gms = []
def be(gm, ex, **kw):
    gms.append(gm); return gm.forward
torch._dynamo.reset()
with torch.no_grad():
    torch.compile(model, backend=be, dynamic=True)(input_ids=torch.randint(3, 128, (3, 9)), use_cache=False)
g = gms[0]
for n in g.graph.nodes:
    v = n.meta.get("example_value", n.meta.get("val"))
    if n.op == "placeholder" and not isinstance(v, torch.Tensor):
        print("PH", n.name, type(v).__name__, v)
lines = g.code.splitlines()
for i, l in enumerate(lines):
    if "softmax" in l:
        print("\n".join(lines[i - 8:i + 3])); break
