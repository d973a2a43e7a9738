"""A user's pattern fuses before pattern_cache.ship() (or any forget_traces: a rule registered) and after it?"""
import sys, tempfile
import conftest  # noqa
import torch
import mojo_compile
from mojo_compile import pattern_cache, patterns
OPT = {"inner_compiler": "eager", "target": "torch"}
def search(x):
    return torch.sigmoid(x) * 3.0
mojo_compile.register_pattern("user.sig3", search, lambda x: torch.sigmoid(x) * 3.0 + 100, [(torch.randn(4, 8),)])
x = torch.randn(3, 8)
def applied():
    torch._dynamo.reset()
    out = torch.compile(lambda x: torch.sigmoid(x) * 3.0, backend="mojo", options=OPT)(x)
    return round((out - search(x)).mean().item())
print("before", applied())
if sys.argv[1] == "ship":
    pattern_cache.ship(tempfile.mkdtemp())
else:
    patterns.forget_traces()
print("after", applied())
