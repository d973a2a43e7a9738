"""uint8 / int16 positions whose eager arithmetic wraps before the int64 arange promotes it."""
from h import *
import torch.nn.functional as F


def offset_positions(q, k, v, cp):
    j = torch.arange(k.shape[2])
    pos = (cp + 100)[None] + torch.arange(q.shape[2])  # cp + 100 in cp's dtype (wraps), then int64
    return F.scaled_dot_product_attention(q, k, v, attn_mask=j[None, :] <= pos[:, None])


for cdt, val in [(torch.uint8, 160), (torch.int16, 32700), (torch.int64, 160)]:
    for target in ["torch", "ttx"]:
        q = torch.randn(1, 2, 3, 8); k, v = torch.randn(1, 2, 300, 8), torch.randn(1, 2, 300, 8)
        cp = torch.tensor(val, dtype=cdt)
        out, mut, s = run(offset_positions, [q, k, v, cp], target)
        (c, e, sd, ss), = out
        print("OK " if c <= 2 * e + 1e-6 else "BAD", cdt, target, f"{c:.2e} {e:.2e}", [d for _, d in s])
