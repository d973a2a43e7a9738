import sys
import torch
import torch.nn.functional as F
from h import safe

T = sys.argv[1] if len(sys.argv) > 1 else "torch"
WHICH = sys.argv[2] if len(sys.argv) > 2 else "all"
H, D = 2, 8


def att(mask_fn):
    def f(q, k, v):
        sq, skv = q.shape[2], k.shape[2]
        i = torch.arange(skv - sq, skv, device=q.device)[:, None]
        j = torch.arange(skv, device=q.device)[None, :]
        s = skv
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask_fn(i, j, s)[None, None])
    return f


MASKS = {
    "off_s10": lambda i, j, s: j <= i + s // 10,
    "or_tail": lambda i, j, s: (j <= i) | (j < s - 8),
    "win_half": lambda i, j, s: (j <= i) & (j > i - s // 2),
    "win4": lambda i, j, s: (j <= i) & (j > i - 4),
    "sink_win": lambda i, j, s: (j <= i) & ((j > i - 4) | (j == 0)),
    "mod": lambda i, j, s: (j <= i) & (j % 8 != 7),
    "s_minus": lambda i, j, s: j <= i - (s - 9).clamp_min(0) if isinstance(s, torch.Tensor) else j <= i - max(s - 9, 0),
    "ge_s8": lambda i, j, s: (j <= i) & ((j >= 0) if s < 8 else (j >= 1)) | (j == i),
    "min_s": lambda i, j, s: j <= torch.minimum(i, torch.full_like(i, 8)),
    "flip": lambda i, j, s: (s - 1 - j) >= (s - 1 - i),
    "neg_idx": lambda i, j, s: j <= i.flip(0).flip(0),
}


def kv_cache(q, k, v, cache_position):
    # HF StaticCache style: k/v longer than past + S, mask kv_idx <= cache_position (cache_position a tensor input)
    kv_idx = torch.arange(k.shape[2], device=q.device)
    mask = kv_idx[None, :] <= cache_position[:, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[None, None])


def kv_cache_int(q, k, v, past: int):
    # positions from a python int (automatic dynamic makes it a SymInt after it changes)
    cache_position = torch.arange(past, past + q.shape[2], device=q.device)
    kv_idx = torch.arange(k.shape[2], device=q.device)
    mask = kv_idx[None, :] <= cache_position[:, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[None, None])


def mk(s):
    B, S = s
    return [torch.randn(B, H, S, D) for _ in range(3)]


def mk_kv(s):
    B, S, L, past = s
    return [torch.randn(B, H, S, D), torch.randn(B, H, L, D), torch.randn(B, H, L, D), torch.arange(past, past + S)]


def mk_kv_int(s):
    B, S, L, past = s
    return [torch.randn(B, H, S, D), torch.randn(B, H, L, D), torch.randn(B, H, L, D), past]


seqs = [(2, 7), (2, 9), (2, 33), (2, 12), (2, 3), (3, 17)]
if __name__ == "__main__":
    for name, m in MASKS.items():
        if WHICH != "all" and name not in WHICH.split(","):
            continue
        safe(name + "-seq", att(m), mk, seqs, target=T, mode="auto")
        safe(name + "-dyn", att(m), mk, seqs, target=T, mode="dyn")
    if WHICH in ("all", "kv"):
        # prefill 5 of a 16-slot cache, then decode steps
        kvs = [(2, 5, 16, 0), (2, 1, 16, 5), (2, 1, 16, 6), (2, 1, 16, 7), (2, 3, 16, 8), (2, 1, 20, 19), (2, 4, 20, 16)]
        safe("kv_cache-seq", kv_cache, mk_kv, kvs, target=T, mode="auto")
        safe("kv_cache-dyn", kv_cache, mk_kv, kvs, target=T, mode="dyn")
        safe("kv_int-seq", kv_cache_int, mk_kv_int, kvs, target=T, mode="auto")
        safe("kv_int-dyn", kv_cache_int, mk_kv_int, kvs, target=T, mode="dyn")
