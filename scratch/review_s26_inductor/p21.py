from h import *
import copy
from test_hf_models import build
model = build("phi3", torch.bfloat16).train()
exact = copy.deepcopy(model).double()
torch.manual_seed(1)
ids = torch.randint(3, 256, (2, 8)); am = torch.ones(2, 8, dtype=torch.long); am[1, :3] = 0
ld = exact(input_ids=ids, attention_mask=am, labels=ids).loss
le = model(input_ids=ids, attention_mask=am, labels=ids).loss
print("eager", rel(le, ld))
for be, opts in [("inductor", None), ("mojo", {"target": "torch"}), ("mojo", {"target": "torch", "inner_compiler": "eager"}), ("mojo", {"target": "torch", "disable": ["cross_entropy"]})]:
    torch._dynamo.reset()
    c = torch.compile(copy.deepcopy(model), backend=be, options=opts) if opts else torch.compile(copy.deepcopy(model), backend=be)
    print(be, opts, rel(c(input_ids=ids, attention_mask=am, labels=ids).loss, ld))
