"""HF eager attention's additive mask `where(allowed, 0, finfo(dtype).min)`: fp16 (min -65504) vs bf16 / fp32."""
from h import *
import torch.nn.functional as F


def eager_attn(q, k, v):
    s = q.shape[2]
    allowed = torch.arange(s)[None, :] <= torch.arange(s)[:, None]
    mask = torch.where(allowed, torch.zeros((), dtype=q.dtype), torch.finfo(q.dtype).min)[None, None]
    w = torch.matmul(q, k.transpose(2, 3)) * 0.35 + mask
    w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(w, v)


def sdpa_additive(q, k, v):
    s = q.shape[2]
    allowed = torch.arange(s)[None, :] <= torch.arange(s)[:, None]
    mask = torch.where(allowed, torch.zeros((), dtype=q.dtype), torch.finfo(q.dtype).min)[None, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


for fn in [eager_attn, sdpa_additive]:
    for dt in [torch.float16, torch.bfloat16, torch.float32]:
        for dyn in [False, True]:
            q, k, v = (torch.randn(1, 2, 6, 8).to(dt) for _ in range(3))
            out, mut, s = run(fn, [q, k, v], dynamic=dyn)
            print(fn.__name__, dt, dyn, [round(c / e, 2) for c, e, *_ in out], s)
