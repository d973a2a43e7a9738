"""dynamic=True: hidden size / output size changing between calls, one graph; ttx and torch+inductor."""
from h import *
import torch.nn.functional as F


def fn(x, wq, wk, wg, wu):
    return F.linear(x, wq), F.linear(x, wk), F.silu(F.linear(x, wg)) * F.linear(x, wu)

for target, inner in [("ttx", "eager"), ("torch", "inductor")]:
    torch._dynamo.reset(); mojo_compile.reset_report()
    c = comp(fn, target, inner, dynamic=True)
    for (k, n) in [(40, 12), (72, 20), (1030, 33)]:
        for dt in [torch.float32, torch.bfloat16]:
            args = [torch.randn(1, 1, k).to(dt)] + [(torch.randn(n, k) / k ** .5).to(dt) for _ in range(4)]
            with torch.no_grad():
                got = c(*args); e = fn(*args); d = fn(*[a.double() for a in args])
            print(target, inner, k, n, dt, [round(rel(g, z) / max(rel(ee, z), 1e-9), 2) for g, ee, z in zip(got, e, d)])
    print(mojo_compile.last_report().counts(), len(mojo_compile.last_report().graphs))
