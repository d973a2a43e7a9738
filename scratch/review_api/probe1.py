import conftest  # noqa
import torch, torch.nn.functional as F
import mojo_compile
torch._dynamo.config.cache_size_limit = 64
OPT = {"inner_compiler": "eager", "target": "torch"}

def sites():
    return [s.pattern for s in mojo_compile.last_report().sites]

# A and B: the same search, different replacements
def search(x):
    return torch.sigmoid(x) * 3.0
def repA(x):
    return torch.sigmoid(x) * 3.0 + 100
def repB(x):
    return torch.sigmoid(x) * 3.0 + 200
mojo_compile.register_pattern("userA", search, repA, [(torch.randn(4, 8),)])
mojo_compile.register_pattern("userB", search, repB, [(torch.randn(4, 8),)], priority=50)
x = torch.randn(3, 8)
torch._dynamo.reset()
out = torch.compile(lambda x: torch.sigmoid(x) * 3.0, backend="mojo", options=OPT)(x)
print("both:", sites(), (out - search(x)).mean().item())
torch._dynamo.reset()
out = torch.compile(lambda x: torch.sigmoid(x) * 3.0, backend="mojo", options={**OPT, "disable": ["userA"]})(x)
print("A disabled:", sites(), (out - search(x)).mean().item())
mojo_compile.unregister_pattern("userA")
torch._dynamo.reset()
out = torch.compile(lambda x: torch.sigmoid(x) * 3.0, backend="mojo", options=OPT)(x)
print("A unregistered:", sites(), (out - search(x)).mean().item())
