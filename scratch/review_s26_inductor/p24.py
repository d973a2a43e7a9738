from h import *
import torch.nn as nn
from mojo_compile import backend
torch.manual_seed(0)
if sys.argv[1] == "fix":
    orig = backend.inner_compile
    def patched(aten_gm, example_inputs, options, of_dtensors=False):
        for node, value in zip(aten_gm.graph.find_nodes(op="placeholder"), example_inputs):
            if isinstance(value, torch.Tensor) and isinstance(node.meta.get("val"), torch.Tensor):
                node.meta["val"] = value
        return orig(aten_gm, example_inputs, options, of_dtensors)
    backend.inner_compile = patched
class M(nn.Module):
    def __init__(s):
        super().__init__(); s.norm = nn.RMSNorm(16); s.lin = nn.Linear(16, 16)
    def forward(s, x): return s.lin(x) + s.norm(x)
for opts in [{"cpp_wrapper": True}, {"cpp_wrapper": True, "disable": ["rms_norm"]}]:
    torch._dynamo.reset()
    m = M(); head = nn.Linear(16, 1)
    m.compile(backend="mojo", options=opts)
    x = torch.randn(3, 16)
    y = m(x)
    print(opts, "output requires_grad:", y.requires_grad)
    loss = (head(y) ** 2).sum() + head.weight.sum()
    loss.backward()
    print("  grads:", {n: None if p.grad is None else round(p.grad.norm().item(), 4) for n, p in m.named_parameters()})
torch._dynamo.reset()
m = M(); m.compile(backend="inductor", options={"cpp_wrapper": True}); print("plain inductor cpp_wrapper requires_grad:", m(torch.randn(3, 16)).requires_grad)
