"""Batch-1 decode with an attention_mask input: is the key padding proven as at batch 2?"""
from h import *
import torch.nn.functional as F


def causal_pad(q, k, v, am):
    s = q.shape[2]
    i = torch.arange(s)[:, None]; j = torch.arange(s)[None, :]
    m = (j <= i)[None, None] & am[:, None, None, :].bool()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m)


for b in [1, 2]:
    for dyn in [False, True]:
        q, k, v = (torch.randn(b, 2, 6, 8) for _ in range(3))
        am = torch.ones(b, 6, dtype=torch.long)
        out, mut, s = run(causal_pad, [q, k, v, am], dynamic=dyn)
        print(b, dyn, out, s)
