import conftest  # noqa
import torch, mojo_compile
from mojo_compile import canonicalize
aten = torch.ops.aten
for op in [o for o in (aten.add.out, aten.sum.dim_IntList, aten.cumsum.default, aten.add.Tensor, aten.var_mean.correction, aten.clamp.default, aten.empty_like.default, aten.zeros.default, aten.to.dtype, aten._to_copy.default) if o not in canonicalize.RULES]:
    canonicalize.register_rule(op, canonicalize.all_arguments)
OPT = {"inner_compiler": "eager", "target": "torch"}
def f(a, b, c):
    torch.add(a, b, out=c)
    s = torch.sum(a * 2, 1, dtype=torch.float64)
    v, m = torch.var_mean(a, dim=1, correction=0)
    z = torch.zeros(3, 4) + torch.empty_like(a).fill_(1.0)
    return c * 2, s, torch.cumsum(a, 0, dtype=torch.float64), v, m, torch.clamp(a, min=-0.5), z, a.to(torch.float16), a + b
a, b = torch.randn(3, 4), torch.randn(3, 4)
c1, c2 = torch.empty(3, 4), torch.empty(3, 4)
out = torch.compile(f, backend="mojo", options=OPT)(a, b, c1)
exp = f(a, b, c2)
for o, e in zip(out, exp): torch.testing.assert_close(o, e)
torch.testing.assert_close(c1, c2)
print("AA OK")
