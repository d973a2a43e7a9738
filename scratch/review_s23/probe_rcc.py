import torch, mojo_compile, sys
torch._dynamo.reset = torch._dynamo.reset_code_caches
OPT = {"inner_compiler": "eager", "target": "torch"}
def search(x):
    return torch.sigmoid(x) * 3.0
def plus(offset):
    return lambda x: 3.0 / (1.0 + torch.exp(-x)) + offset
x = torch.randn(3, 8)
if sys.argv[1] == "unreg":
    mojo_compile.register_pattern('user.sig3', search, plus(100), [(torch.randn(4, 8),)])
compiled = torch.compile(search, backend="mojo", options=OPT)
compiled(x)
if sys.argv[1] == "unreg":
    mojo_compile.unregister_pattern('user.sig3')
else:
    mojo_compile.register_pattern('user.sig3', search, plus(100), [(torch.randn(4, 8),)])
print(round((compiled(x) - search(x)).mean().item()), round((torch.compile(search, backend="mojo", options=OPT)(x) - search(x)).mean().item()))
