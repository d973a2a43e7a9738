"""What q/k/v layouts reach mojo::attention (and the rope / gated inputs) in an HF-style compiled block."""
import conftest  # noqa: F401
import torch
import torch.nn.functional as F
import mojo_compile
from mojo_compile import lowering

seen = []
orig = lowering.call


def spy(op, target, *args):
    seen.append((op, [(tuple(a.shape), a.stride(), a.is_contiguous()) for a in args if isinstance(a, torch.Tensor)]))
    return orig(op, target, *args)


lowering.call = spy


class Attn(torch.nn.Module):
    def __init__(self, h=64, heads=4, kv=2):
        super().__init__()
        self.heads, self.kv, self.d = heads, kv, h // heads
        self.q = torch.nn.Linear(h, h, bias=False)
        self.k = torch.nn.Linear(h, kv * self.d, bias=False)
        self.v = torch.nn.Linear(h, kv * self.d, bias=False)
        self.gu = torch.nn.Linear(h, 2 * 96, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.d).transpose(1, 2)
        k = self.k(x).view(b, s, self.kv, self.d).transpose(1, 2)
        v = self.v(x).view(b, s, self.kv, self.d).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        g, u = self.gu(x).chunk(2, -1)
        return o.transpose(1, 2).reshape(b, s, -1), F.silu(g) * u


m = Attn().to(torch.bfloat16)
x = torch.randn(2, 6, 64, dtype=torch.bfloat16)
c = torch.compile(m, backend="mojo", options={"target": "torch", "inner_compiler": "eager"})
with torch.no_grad():
    c(x)
print([s.op for s in mojo_compile.last_report().sites] if hasattr(mojo_compile.last_report().sites[0], 'op') else mojo_compile.last_report().sites)
for op, info in seen:
    print(op, info)
