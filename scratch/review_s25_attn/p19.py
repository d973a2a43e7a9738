from harness import *
torch.manual_seed(0)
B,H,S,D=2,4,6,8
def rh(x):
    h=x.shape[-1]//2; return torch.cat((-x[..., h:], x[..., :h]), -1)
def rope(q,k,cos,sin):
    c,s=cos.unsqueeze(1),sin.unsqueeze(1)
    return q*c+rh(q)*s, k*c+rh(k)*s
def rope_t(qT,kT,cosT,sinT):
    return rope(qT.transpose(2,3), kT.transpose(2,3), cosT.transpose(1,2), sinT.transpose(1,2))
def rope_sdpa_t(qT,kT,vT,cosT,sinT):
    q,k=rope_t(qT,kT,cosT,sinT)
    return F.scaled_dot_product_attention(q,k,vT.transpose(2,3),is_causal=True)
qT=torch.randn(B,H,D,S); kT=torch.randn(B,H,D,S); cosT=torch.randn(B,D,S); sinT=torch.randn(B,D,S); vT=torch.randn(B,H,D,S)
for t in ("torch","ttx"):
    probe(f"rope transposed strides {t}", rope_t, qT,kT,cosT,sinT, target=t)
    probe(f"rope+sdpa transposed strides {t}", rope_sdpa_t, qT,kT,vT,cosT,sinT, target=t)
    # cos with a stride-0 seq dim (same position everywhere) and stride-0 last dim? expand
    c1=torch.randn(B,1,D).expand(B,S,D); s1=torch.randn(B,1,D).expand(B,S,D)
    probe(f"rope expanded cos {t}", rope, torch.randn(B,H,S,D), torch.randn(B,H,S,D), c1, s1, target=t)
    # cos from a wider table sliced (non-contiguous rows)
    big=torch.randn(B,S,3*D)
    probe(f"rope sliced cos {t}", rope, torch.randn(B,H,S,D), torch.randn(B,H,S,D), big[..., :D], big[..., D:2*D], target=t)
    big2=torch.randn(B,S,2*D)
    probe(f"rope strided cos {t}", rope, torch.randn(B,H,S,D), torch.randn(B,H,S,D), big2[..., ::2], big2[..., 1::2], target=t)
