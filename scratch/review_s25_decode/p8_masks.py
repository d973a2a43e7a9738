"""Masks with runtime inputs: positions + key padding with fully masked rows, windows, bf16/fp16, decode Sq=1."""
from h import *
import torch.nn.functional as F

B, H, D = 2, 2, 8


def pos_pad(q, k, v, cp, am):
    j = torch.arange(k.shape[2])
    m = (j[None, None, None, :] <= cp[None, None, :, None]) & am[:, None, None, :].bool()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m)


def pos_pad_window(q, k, v, cp, am):
    j = torch.arange(k.shape[2])
    p = cp[None, None, :, None]
    m = (j[None, None, None, :] <= p) & (j[None, None, None, :] > p - 3) & (am[:, None, None, :] != 0)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m)


def causal_pad(q, k, v, cp, am):
    s = q.shape[2]
    i = torch.arange(s)[:, None]; j = torch.arange(s)[None, :]
    m = (j <= i)[None, None] & am[:, None, None, :].bool()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m)


def gqa_pos(q, k, v, cp, am):
    j = torch.arange(k.shape[2])
    m = (j[None, None, None, :] <= cp[None, None, :, None]) & am[:, None, None, :].bool()
    return F.scaled_dot_product_attention(q, k[:, :1], v[:, :1], attn_mask=m, enable_gqa=True)


for fn in [pos_pad, pos_pad_window, causal_pad, gqa_pos]:
    for dt in [torch.float32, torch.bfloat16, torch.float16]:
        for dyn in [False, True]:
            for (sq, skv, cpv, am_rows) in [(1, 9, [4], ([1] * 9, [0] * 9)), (3, 9, [2, 3, 4], ([0, 0, 1, 1, 1, 0, 0, 0, 0], [1] * 9)),
                                            (1, 9, [20], ([1] * 9, [0, 0, 0, 0, 1, 1, 1, 1, 1])), (2, 9, [-1, 0], ([1] * 9, [1] * 9))]:
                if fn is causal_pad:
                    sq = skv = 6; am_rows = ([0, 0, 0, 1, 1, 1], [1] * 6); cpv = list(range(6))
                q = torch.randn(B, H, sq, D).to(dt)
                k, v = (torch.randn(B, H, skv, D).to(dt) for _ in range(2))
                cp = torch.tensor(cpv); am = torch.tensor(am_rows)
                try:
                    out, mut, s = run(fn, [q, k, v, cp, am], "torch", dynamic=dyn)
                    (c, e, sd, ss), = out
                    tol = 2 * e + (1e-6 if dt == torch.float32 else 1e-3)
                    flag = "OK " if c <= tol and sd and ss else "BAD"
                    print(flag, fn.__name__, dt, dyn, sq, skv, cpv, f"{c:.2e} {e:.2e}", [d for _, d in s])
                except Exception as ex:
                    print("CRASH", fn.__name__, dt, dyn, sq, skv, repr(ex)[:300])
