import conftest
import torch
from mojo_compile import patterns, pattern_cache
def my_search(x, w):
    return torch.nn.functional.silu(x) * w
gm = patterns._registration_trace(my_search, [torch.randn(4, 8), torch.randn(4, 8)])
print(repr(str(gm)[:80]))
gm2 = pattern_cache.graph_from_json(pattern_cache.graph_to_json(gm.graph))
print(repr(str(gm2)[:80]))
print(str(gm) == str(gm2))
