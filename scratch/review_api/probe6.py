import conftest  # noqa
import torch, torch.nn.functional as F
import mojo_compile
OPT = {"inner_compiler": "eager", "target": "torch"}
import sys
first = sys.argv[1] == "compile_first"
def f(gate, up):
    return F.silu(gate) * up
g, u = torch.randn(2, 5, 64, dtype=torch.bfloat16), torch.randn(2, 5, 64, dtype=torch.bfloat16)
if first:
    torch.compile(lambda a, b: F.silu(a) * b, backend="mojo", options=OPT)(g, u)
    print("first compile sites:", [s.pattern for s in mojo_compile.last_report().sites])
mojo_compile.register_pattern("user.swiglu", f, lambda gate, up: F.silu(gate) * up + 100,
                              [(torch.randn(2, 3, 8, dtype=torch.bfloat16), torch.randn(2, 3, 8, dtype=torch.bfloat16))],
                              priority=100)
mojo_compile.reset_report()
out = torch.compile(lambda a, b: F.silu(a) * b + 0, backend="mojo", options=OPT)(g, u)
print("after user registration: sites", [s.pattern for s in mojo_compile.last_report().sites], "user applied:", (out - f(g, u)).float().abs().max().item() > 50)
