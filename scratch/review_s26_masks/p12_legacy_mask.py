"""transformers' legacy 4-D mask builders (modeling_attn_mask_utils, still shipped in 5.25, used by remote-code
models): does the mask prove causal?"""
from h import *
import torch.nn.functional as F
from transformers.modeling_attn_mask_utils import (_prepare_4d_causal_attention_mask,
                                                   _prepare_4d_causal_attention_mask_for_sdpa)
B, S = 2, 7


def legacy(x, q, k, v):
    mask = _prepare_4d_causal_attention_mask(None, (B, S), x, 0)
    w = torch.matmul(q, k.transpose(2, 3)) * 0.35 + mask
    return torch.matmul(F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype), v)


def legacy_window(x, q, k, v):
    mask = _prepare_4d_causal_attention_mask(None, (B, S), x, 0, sliding_window=3)
    w = torch.matmul(q, k.transpose(2, 3)) * 0.35 + mask
    return torch.matmul(F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype), v)


def legacy_padded(x, q, k, v, am):
    mask = _prepare_4d_causal_attention_mask(am, (B, S), x, 0)
    w = torch.matmul(q, k.transpose(2, 3)) * 0.35 + mask
    return torch.matmul(F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype), v)


torch.manual_seed(0)
x = torch.randn(B, S, 16)
q, k, v = (torch.randn(B, 2, S, 8) for _ in range(3))
am = torch.ones(B, S, dtype=torch.long); am[1, :2] = 0
for fn, args in ((legacy, (x, q, k, v)), (legacy_window, (x, q, k, v)), (legacy_padded, (x, q, k, v, am))):
    fresh()
    c = comp(fn)(*args); e = fn(*args)
    print(fn.__name__, (c - e).abs().max().item(), att_sites())
