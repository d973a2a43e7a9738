"""Sweep decode linears: spellings x dtypes x rows x layouts, torch and ttx targets, no_grad."""
import itertools, traceback
from h import *
import torch.nn.functional as F

SP = {
    "linear": lambda x, w: F.linear(x, w),
    "matmul": lambda x, w: torch.matmul(x, w.t()),
    "at": lambda x, w: x @ w.T,
    "mm": lambda x, w: torch.mm(x.reshape(-1, x.shape[-1]), w.t()),
    "einsum": lambda x, w: torch.einsum("...k,nk->...n", x, w),
    "qkv": lambda x, w: (F.linear(x, w[:4]), F.linear(x, w[4:8]), F.linear(x, w[8:])),
    "gated": lambda x, w: F.silu(F.linear(x, w[:6])) * F.linear(x, w[6:12]),
    "gated_gelu": lambda x, w: F.gelu(F.linear(x, w[:6]), approximate="tanh") * F.linear(x, w[6:12]),
}
bad = []
for target in ["torch", "ttx"]:
    for name, fn in SP.items():
        for dt in [torch.float32, torch.bfloat16, torch.float16, torch.float64]:
            for xs in [(1, 40), (3, 40), (2, 1, 40), (1, 2, 2, 40), (4, 1, 40)]:
                for wl in ["contig", "T", "slice"]:
                    x = torch.randn(*xs).to(dt)
                    if wl == "contig":
                        w = torch.randn(12, 40).to(dt)
                    elif wl == "T":
                        w = torch.randn(40, 12).to(dt).t()
                    else:
                        w = torch.randn(14, 50).to(dt)[1:13, 5:45]
                    try:
                        with torch.no_grad():
                            out, mut, s = run(fn, [x, w], target)
                    except Exception as e:
                        bad.append((target, name, dt, xs, wl, "CRASH", repr(e)[:200])); continue
                    for (c, e, sd, ss) in out:
                        tol = 2 * e + (1e-6 if dt == torch.float32 else 1e-2 if dt != torch.float64 else 1e-14)
                        if not (sd and ss) or c > tol or not all(mut):
                            bad.append((target, name, dt, xs, wl, c, e, sd, ss, mut, s))
print(len(bad))
for b in bad: print(b)
