"""Runtime query positions of other integer dtypes (int32 / int16 / uint8 cache_position), 0-d positions; torch, ttx."""
from h import *
import torch.nn.functional as F


def at_positions(q, k, v, cp, am):
    j = torch.arange(k.shape[2])
    m = (j[None, None, None, :] <= cp[None, None, :, None]) & am[:, None, None, :].bool()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m)


def at_scalar(q, k, v, cp, am):
    j = torch.arange(k.shape[2])
    m = (j[None, None, None, :] <= cp + torch.arange(q.shape[2])[None, None, :, None]) & am[:, None, None, :].bool()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m)


for fn, cpv in [(at_positions, [3, 5, 200]), (at_scalar, 4)]:
    for cdt in [torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8]:
        for target in ["torch", "ttx"]:
            sq = 3
            q = torch.randn(2, 2, sq, 8); k, v = torch.randn(2, 2, 9, 8), torch.randn(2, 2, 9, 8)
            cp = torch.tensor(cpv, dtype=cdt)
            am = torch.ones(2, 9, dtype=torch.uint8); am[1, :2] = 0
            try:
                out, mut, s = run(fn, [q, k, v, cp, am], target)
                (c, e, sd, ss), = out
                print("OK " if c <= 2 * e + 1e-6 else "BAD", fn.__name__, cdt, target, f"{c:.2e} {e:.2e}", [d for _, d in s])
            except Exception as ex:
                print("CRASH", fn.__name__, cdt, target, repr(ex)[:300])
