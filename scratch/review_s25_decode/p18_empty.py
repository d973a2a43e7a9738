"""Empty sizes on the decode ops: K = 0, N = 0 (in a group, gated), 1-D x."""
from h import *
import torch.nn.functional as F
cases = {
    "K=0 linear": (lambda x, w: F.linear(x, w), [(2, 0), (5, 0)]),
    "K=0 gated": (lambda x, w: F.silu(F.linear(x, w[:2])) * F.linear(x, w[2:4]), [(2, 0), (5, 0)]),
    "N=0 in qkv": (lambda x, w: (F.linear(x, w[:3]), F.linear(x, w[3:3]), F.linear(x, w[3:])), [(2, 8), (5, 8)]),
    "N=0 gated": (lambda x, w: F.silu(F.linear(x, w[:0])) * F.linear(x, w[1:1]), [(2, 8), (5, 8)]),
    "1-D x gated": (lambda x, w: F.silu(F.linear(x, w[:2])) * F.linear(x, w[2:4]), [(8,), (5, 8)]),
    "1-D x qkv": (lambda x, w: (F.linear(x, w[:2]), F.linear(x, w[2:])), [(8,), (5, 8)]),
}
for name, (fn, shapes) in cases.items():
    for target in ["torch", "ttx"]:
        args = [torch.randn(*s) for s in shapes]
        with torch.no_grad():
            try:
                out, mut, s = run(fn, args, target)
                ok = all(sd and ss and (c <= 2 * e + 1e-6) for c, e, sd, ss in out)
                print("OK " if ok else "BAD", name, target, out, [o for o, _ in s])
            except Exception as ex:
                print("CRASH", name, target, repr(ex)[:300])
