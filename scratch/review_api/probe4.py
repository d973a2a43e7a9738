import conftest  # noqa
import torch
import mojo_compile
OPT = {"inner_compiler": "eager", "target": "torch"}

def f(x):
    return torch.sigmoid(x) * 3.0
def rep(x):
    return torch.sigmoid(x) * 3.0 + 100
def g(x):
    return torch.sigmoid(x) * 3.0
x = torch.randn(4, 8)
mojo_compile.register_pattern("user.sig3", f, rep, [(torch.randn(4, 8),)])
print("fused:", (torch.compile(g, backend="mojo", options=OPT)(x) - f(x)).abs().max().item())
print("new compile with disable:", (torch.compile(g, backend="mojo", options={**OPT, "disable": ["user.sig3"]})(x) - f(x)).abs().max().item())
mojo_compile.unregister_pattern("user.sig3")
print("new compile after unregister:", (torch.compile(g, backend="mojo", options=OPT)(x) - f(x)).abs().max().item())
print("verify after unregister:", mojo_compile.verify(g, x, options=OPT).ok, (torch.compile(g, backend="mojo", options=OPT)(x) - f(x)).abs().max().item())
