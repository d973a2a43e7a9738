from h import *
import torch.nn.functional as F
torch.manual_seed(0)
H = 8
def gated_mut_after(g, u):
    y = F.silu(g) * u
    g.mul_(2)
    return y
g = torch.randn(2, H); u = torch.randn(2, H, requires_grad=True)
def run(be, **kw):
    torch._dynamo.reset()
    gg, uu = g.clone(), u.detach().clone().requires_grad_()
    fn = torch.compile(gated_mut_after, backend=be, **kw) if be else gated_mut_after
    y = fn(gg, uu)
    y.backward(torch.ones_like(y))
    return uu.grad
ref = F.silu(g)
print("eager", (run(None) - ref).abs().max().item())
for be, kw in [("inductor", {}), ("aot_eager", {}), ("mojo", {"options": {"target": "torch"}}), ("mojo", {"options": {"target": "torch", "inner_compiler": "eager"}})]:
    try:
        print(be, kw, (run(be, **kw) - ref).abs().max().item())
    except Exception as ex: print(be, kw, "CRASH", type(ex).__name__, str(ex)[:200])
