from harness import *
import functools
torch.manual_seed(0)
B,H,S,D=2,4,5,8
def rotate_half(x):
    h=x.shape[-1]//2; return torch.cat((-x[..., h:], x[..., :h]), -1)
def rte(x): return torch.stack((-x[...,1::2], x[...,::2]),-1).flatten(-2)
def block(x, w, cos, sin, rot=None, inter=False):
    qkv = (x @ w).view(B, S, 3, H, D)
    q, k, v = qkv.unbind(2)  # BSHD, non-contiguous
    c, s = cos.unsqueeze(2), sin.unsqueeze(2)
    r = rte if inter else rotate_half
    if rot is None:
        q = q * c + r(q) * s; k = k * c + r(k) * s
    else:
        q = torch.cat([q[..., :rot] * c + r(q[..., :rot]) * s, q[..., rot:]], -1)
        k = torch.cat([k[..., :rot] * c + r(k[..., :rot]) * s, k[..., rot:]], -1)
    return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
x = torch.randn(B, S, 16); w = torch.randn(16, 3 * H * D) * 0.3
cos = torch.randn(B, S, D); sin = torch.randn(B, S, D)
for t in ("torch", "ttx"):
    probe(f"qkv unbind bshd rope {t}", block, x, w, cos, sin, target=t)
    probe(f"qkv unbind bshd interleaved {t}", functools.partial(block, inter=True), x, w, cos, sin, target=t)
    probe(f"qkv unbind partial {t}", functools.partial(block, rot=4), x, w, cos[..., :4].contiguous(), sin[..., :4].contiguous(), target=t)
    probe(f"qkv unbind bf16 {t}", block, x.bfloat16(), w.bfloat16(), cos, sin, target=t)
