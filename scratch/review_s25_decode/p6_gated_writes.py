"""gated_linear: writes between the projections and the product (the fused op runs at the product's place)."""
from h import *
import torch.nn.functional as F


def mk(write):
    def fn(x, g, u):
        a, b = F.linear(x, g), F.linear(x, u)
        write(x, g, u, a, b)
        return F.silu(a) * b
    return fn

cases = {
    "gate weight mul_": lambda x, g, u, a, b: g.mul_(2),
    "up weight via view": lambda x, g, u, a, b: u[0].add_(1),
    "x via view": lambda x, g, u, a, b: x.view(-1)[0:3].add_(1),
    "gate out add_": lambda x, g, u, a, b: a.add_(1),
    "up out via view": lambda x, g, u, a, b: b[..., 0].fill_(3),
    "x copy_": lambda x, g, u, a, b: x.copy_(torch.ones_like(x)),
    "x zero_": lambda x, g, u, a, b: x.zero_(),
    "g t_().mul_": lambda x, g, u, a, b: g.t().mul_(2),
    "foreach on g,u": lambda x, g, u, a, b: torch._foreach_mul_([g, u], 3.0),
    "x index_fill_": lambda x, g, u, a, b: x.index_fill_(-1, torch.tensor([0, 2]), 5.0),
    "nothing": lambda x, g, u, a, b: None,
}
for name, w in cases.items():
    for target in ["torch", "ttx"]:
        args = [torch.randn(2, 1, 8), torch.randn(6, 8) / 3, torch.randn(6, 8) / 3]
        with torch.no_grad():
            try:
                out, mut, s = run(mk(w), args, target)
                ok = all(c <= 2 * e + 1e-6 for c, e, *_ in out) and all(mut)
                print(f"{name:18s} {target:5s}", "OK " if ok else "BAD", [(c, e) for c, e, *_ in out], mut, [o for o, _ in s])
            except Exception as e:
                print(name, target, "CRASH", repr(e)[:300])
