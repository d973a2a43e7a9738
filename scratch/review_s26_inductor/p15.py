from h import *
import torch.nn.functional as F
def attn_scale(q, k, v, scale):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
q, k, v = [torch.randn(1, 2, 6, 16) for _ in range(3)]
torch._dynamo.reset(); mojo_compile.reset_report()
c = torch.compile(attn_scale, backend="mojo", options={"target": "ttx", "inner_compiler": "eager"}, dynamic=True)
c(q, k, v, 0.37)
for g in mojo_compile.last_report().graphs:
    print(g.compile_id, [ (s.pattern, s.detail) for s in g.sites], g.notes)
    print(g.graph)
c(q, k, v, 0.5); print(len(mojo_compile.last_report().graphs))
