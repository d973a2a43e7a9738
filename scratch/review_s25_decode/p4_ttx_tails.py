"""ttx GEMV kernels (interpreter) on K / N tails and multi-weight launches of unequal N."""
from h import *
import torch.nn.functional as F
bad = []
for dt in [torch.float32, torch.bfloat16, torch.float16]:
    for m in [1, 2, 3, 4]:
        for (n, k) in [(37, 1500), (1, 1025), (33, 9000), (17, 513)]:
            x = torch.randn(m, 1, k).to(dt)
            w = (torch.randn(3 * n + 5, k) / k ** 0.5).to(dt)
            fns = {
                "lin": lambda x, w: F.linear(x, w[:n]),
                "qkv": lambda x, w: (F.linear(x, w[:n]), F.linear(x, w[n:n + 3]), F.linear(x, w[n + 3:])),
                "gated": lambda x, w: F.silu(F.linear(x, w[:n])) * F.linear(x, w[n:2 * n]),
            }
            for name, fn in fns.items():
                with torch.no_grad():
                    out, mut, s = run(fn, [x, w], "ttx")
                for c, e, sd, ss in out:
                    tol = 2 * e + (4 * 2 ** -24 if dt == torch.float32 else 2 ** -20) if dt == torch.float32 else 1.25 * e + 2 ** -20
                    if c > tol or not (sd and ss):
                        bad.append((dt, m, n, k, name, c, e, s))
print(len(bad))
for b in bad: print(b)
