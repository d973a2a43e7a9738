"""A mask subgraph with a random op (key dropout / DropKey-style): evaluated once at compile time as a constant?"""
import sys
from h import *
import torch.nn.functional as F
tgt = sys.argv[1] if len(sys.argv) > 1 else "torch"
inner = sys.argv[2] if len(sys.argv) > 2 else "eager"
S = 6


def drop_keys(q, k, v):
    i = torch.arange(S)
    causal = i[None, :] <= i[:, None]
    keep = torch.rand(S) > 0.3          # drop ~30% of the keys at random, every call
    keep[0] = True
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal & keep[None, :])


def coin(q, k, v):
    i = torch.arange(S)
    causal = i[None, :] <= i[:, None]
    bidir = torch.rand(()) < 0.5        # prefix-LM style: sometimes bidirectional
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal | bidir)


for fn in (drop_keys, coin):
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, S, 8) for _ in range(3))
    fresh()
    cf = comp(fn, tgt, inner)
    bad = 0
    for seed in range(8):
        torch.manual_seed(100 + seed); e = fn(q, k, v)
        torch.manual_seed(100 + seed); c = cf(q, k, v)
        diff = (c - e).abs().max().item()
        bad += diff > 1e-5
        print(fn.__name__, seed, f"max|c-e| {diff:.3g}")
    print(fn.__name__, "BAD" if bad else "ok", bad, "of 8;", att_sites())
