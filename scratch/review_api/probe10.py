import conftest  # noqa
import sys
import torch, torch.nn.functional as F
import mojo_compile
from mojo_compile import canonicalize
OPT = {"inner_compiler": "eager", "target": "torch"}
if sys.argv[1] == "rule":
    canonicalize.register_rule(torch.ops.aten.softmax.int, canonicalize.all_arguments)
    canonicalize.register_rule(torch.ops.aten._softmax.default, canonicalize.all_arguments)
def attn(q, k, v):
    s = torch.matmul(q, k.transpose(-1, -2)) * 0.25
    return torch.matmul(F.softmax(s, dim=-1), v)
q, k, v = (torch.randn(2, 4, 8, 16) for _ in range(3))
out = torch.compile(attn, backend="mojo", options=OPT)(q, k, v)
print(sys.argv[1], "sites:", [s.pattern for s in mojo_compile.last_report().sites], (out - attn(q, k, v)).abs().max().item())
