import sys
import torch
import torch.nn.functional as F
from h import safe

T = sys.argv[1] if len(sys.argv) > 1 else "torch"
WHICH = sys.argv[2] if len(sys.argv) > 2 else "all"
H, D = 2, 8


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope(q, k, cos, sin):
    cos = cos.unsqueeze(1)
    sin = sin.unsqueeze(1)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def rope_full(q, k, pos):
    # HF rotary embedding computing cos/sin from position ids inside the graph
    inv_freq = 1.0 / (10000 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    freqs = (inv_freq[None, :, None].expand(pos.shape[0], -1, 1) @ pos[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return rope(q, k, emb.cos(), emb.sin())


def mk_rope(s):
    B, S = s
    pos = torch.arange(S)[None].expand(B, S) + torch.randint(0, 5, (B, 1))
    ang = pos[..., None].float() * torch.rand(D // 2).repeat(2)
    return [torch.randn(B, H, S, D), torch.randn(B, H, S, D), ang.cos(), ang.sin()]


def mk_rope_full(s):
    B, S = s
    pos = torch.arange(S)[None].expand(B, S) + torch.randint(0, 5, (B, 1))
    return [torch.randn(B, H, S, D), torch.randn(B, H, S, D), pos]


def sdpa_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def sdpa_arange(q, k, v):
    s = q.shape[2]
    i = torch.arange(s, device=q.device)
    mask = i[None, :] <= i[:, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[None, None])


def sdpa_hf(q, k, v, am):
    # HF's sdpa_mask under compile: causal & padding, built from arange comparisons with cache_position
    b, _, s, _ = q.shape
    cache_position = torch.arange(s, device=q.device)
    kv_idx = torch.arange(k.shape[2], device=q.device)
    causal = kv_idx[None, None, None, :] <= cache_position[None, None, :, None]
    pad = am[:, None, None, :].bool()
    mask = causal & pad
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def sdpa_additive(q, k, v, am):
    b, _, s, _ = q.shape
    i = torch.arange(s, device=q.device)
    causal = (i[None, :] <= i[:, None])[None, None]
    m = torch.zeros(b, 1, s, s, dtype=q.dtype).masked_fill(~causal, torch.finfo(q.dtype).min)
    m = m.masked_fill(am[:, None, None, :] == 0, torch.finfo(q.dtype).min)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m)


def eager_attn(q, k, v, am):
    b, _, s, _ = q.shape
    i = torch.arange(s, device=q.device)
    causal = (i[None, :] <= i[:, None])[None, None] & am[:, None, None, :].bool()
    scores = q @ k.transpose(-1, -2) / (D ** 0.5)
    scores = scores.masked_fill(~causal, torch.finfo(q.dtype).min)
    return torch.softmax(scores, dim=-1) @ v


def mk_qkv(s):
    B, S = s
    return [torch.randn(B, H, S, D) for _ in range(3)]


def mk_qkv_am(s):
    B, S = s
    am = torch.ones(B, S, dtype=torch.long)
    if B > 1 and S > 2:
        am[1, S - S // 2:] = 0  # right padding on row 1 (no fully masked row)
    return [torch.randn(B, H, S, D) for _ in range(3)] + [am]


def sdpa_decode(q, k, v):
    # q has 1 token, kv has S: bottom-right causal = no mask
    return F.scaled_dot_product_attention(q, k, v)


def mk_dec(s):
    B, S = s
    return [torch.randn(B, H, 1, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)]


SKIP0 = {(t, n) for t in ("torch", "ttx") for n in ("causal", "arange", "decode")}
seqs = [(2, 7), (2, 9), (2, 1), (2, 33), (1, 33), (3, 5)]
cases = {
    "rope": (rope, mk_rope), "rope_full": (rope_full, mk_rope_full),
    "causal": (sdpa_causal, mk_qkv), "arange": (sdpa_arange, mk_qkv), "hf": (sdpa_hf, mk_qkv_am),
    "additive": (sdpa_additive, mk_qkv_am), "eager_attn": (eager_attn, mk_qkv_am), "decode": (sdpa_decode, mk_dec),
}
if __name__ == "__main__":
    for name, (fn, mk) in cases.items():
        if name == "rope_full": continue
        if WHICH != "all" and name not in WHICH.split(","):
            continue
        safe(name + "-seq", fn, mk, seqs, target=T, mode="auto")
        safe(name + "-zero", fn, mk, [(2, 7), (2, 9), (2, 0)] if (T, name) not in SKIP0 else [(2, 7), (2, 9), (2, 2)], target=T, mode="auto")
        safe(name + "-dyn", fn, mk, [(2, 7), (2, 9), (2, 1), (3, 33)], target=T, mode="dyn")
        safe(name + "-mark", fn, mk, [(2, 7), (2, 9), (3, 1)], target=T, mode="mark", mark="all2")
