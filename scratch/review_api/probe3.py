import conftest  # noqa
import torch
import mojo_compile
OPT = {"inner_compiler": "eager", "target": "torch"}

def f(x):
    return torch.sigmoid(x) * 3.0
def rep(x):
    return torch.sigmoid(x) * 3.0 + 100

x = torch.randn(4, 8)
c = torch.compile(f, backend="mojo", options=OPT)
print("before:", (c(x) - f(x)).abs().max().item())
mojo_compile.register_pattern("user.sig3", f, rep, [(torch.randn(4, 8),)])
print("same compiled fn after register:", (c(x) - f(x)).abs().max().item())
c2 = torch.compile(f, backend="mojo", options=OPT)
print("new torch.compile after register:", (c2(x) - f(x)).abs().max().item())
c3 = torch.compile(lambda x: f(x), backend="mojo", options=OPT)
print("new fn after register:", (c3(x) - f(x)).abs().max().item())
mojo_compile.unregister_pattern("user.sig3")
c4 = torch.compile(lambda x: f(x) , backend="mojo", options=OPT)
print("c3 after unregister:", (c3(x) - f(x)).abs().max().item())
c5 = torch.compile(f, backend="mojo", options=OPT)
print("new compile of f after unregister:", (c5(x) - f(x)).abs().max().item())
