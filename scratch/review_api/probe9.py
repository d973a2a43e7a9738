import conftest  # noqa
import sys
import torch, torch.nn.functional as F
import mojo_compile
from mojo_compile import canonicalize
OPT = {"inner_compiler": "eager", "target": "torch"}
if sys.argv[1] == "rule":
    canonicalize.register_rule(torch.ops.aten.gelu.default, canonicalize.all_arguments)
def mlp(g, u):
    return F.gelu(g) * u
g, u = torch.randn(2, 5, 64, dtype=torch.bfloat16), torch.randn(2, 5, 64, dtype=torch.bfloat16)
torch.compile(mlp, backend="mojo", options=OPT)(g, u)
print(sys.argv[1], "sites:", [s.pattern for s in mojo_compile.last_report().sites])
