"""torch.func.vmap around decode projections, and functional_call."""
from h import *
import torch.nn.functional as F

cases = {
    "vmap linear (8 x [K])": (lambda x, w: torch.vmap(lambda r: F.linear(r, w))(x), [(8, 16), (6, 16)]),
    "vmap linear (3 x [1,K])": (lambda x, w: torch.vmap(lambda r: F.linear(r, w))(x), [(3, 1, 16), (6, 16)]),
    "vmap over w": (lambda x, w: torch.vmap(lambda ww: F.linear(x, ww))(w), [(2, 16), (5, 6, 16)]),
    "vmap qkv": (lambda x, w: torch.vmap(lambda r: (F.linear(r, w[:3]), F.linear(r, w[3:])))(x), [(8, 16), (6, 16)]),
    "vmap gated": (lambda x, w: torch.vmap(lambda r: F.silu(F.linear(r, w[:3])) * F.linear(r, w[3:]))(x), [(8, 16), (6, 16)]),
}
for name, (fn, shapes) in cases.items():
    for target in ["torch", "ttx"]:
        args = [torch.randn(*s) for s in shapes]
        with torch.no_grad():
            try:
                out, mut, s = run(fn, args, target)
                ok = all(c <= 2 * e + 1e-6 and sd and ss for c, e, sd, ss in out) and all(mut)
                print(f"{name:24s} {target:5s}", "OK " if ok else "BAD", [(c, e) for c, e, *_ in out], [o for o, _ in s])
            except Exception as e:
                print(f"{name:24s} {target:5s}", "CRASH", repr(e)[:400])
