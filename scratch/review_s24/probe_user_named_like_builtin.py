import conftest  # noqa
import torch, torch.nn.functional as F
import mojo_compile
from mojo_compile import pattern_cache, patterns
seen = []
real = pattern_cache._shipped_trace
pattern_cache._shipped_trace = lambda parts: (seen.append(parts[1]), real(parts))[1]
old = patterns._PATTERNS.get("gated_act.silu") or (patterns.load_fusions(), patterns._PATTERNS["gated_act.silu"])[1]
# same name and example inputs as the built-in, another computation: must trace, never read the built-in's entry
mojo_compile.register_pattern("gated_act.silu", lambda gate, up: torch.sigmoid(gate) * up,
                              lambda gate, up: torch.sigmoid(gate) * up + 100, old.example_inputs, replace=True)
g, u = torch.randn(2, 5, 64), torch.randn(2, 5, 64)
out = torch.compile(lambda a, b: torch.sigmoid(a) * b, backend="mojo", options={"inner_compiler": "eager", "target": "torch"})(g, u)
print("user replacement ran:", round((out - torch.sigmoid(g) * u).mean().item()) == 100)
print("shipped read for gated_act.silu:", "gated_act.silu" in seen)
out = torch.compile(lambda a, b: F.silu(a) * b, backend="mojo", options={"inner_compiler": "eager", "target": "torch"})(g, u)
torch.testing.assert_close(out, F.silu(g) * u); print("silu*up correct")
