from h import *
import copy
from test_hf_models import build
dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[sys.argv[1]]
model = build("gpt_neox", dtype).train()
torch.manual_seed(1)
ids = torch.randint(3, 256, (2, 8)); am = torch.ones(2, 8, dtype=torch.long); am[1, :3] = 0
for be, opts in [(sys.argv[2], eval(sys.argv[3]))]:
    torch._dynamo.reset(); mojo_compile.reset_report()
    m = copy.deepcopy(model)
    try:
        c = torch.compile(m, backend=be, options=opts) if opts is not None else torch.compile(m, backend=be)
        out = c(input_ids=ids, attention_mask=am, labels=ids); print(be, opts, "fwd ok")
        out.loss.backward(); print("bwd ok", sites() if be == "mojo" else "")
    except Exception as ex:
        print(be, opts, "CRASH", type(ex).__name__, str(ex)[:3000])
