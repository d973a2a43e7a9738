from harness import *
import functools
torch.manual_seed(0)
B,H,S,D=2,4,6,8
def eager_attn(q,k,v,mask,scale=0.35):
    w=torch.matmul(q,k.transpose(2,3))*scale
    w=w+mask
    w=F.softmax(w,dim=-1,dtype=torch.float32).to(q.dtype)
    return torch.matmul(w,v)
q=torch.randn(B,H,S,D).half()*6; k=torch.randn(B,H,S,D).half()*6; v=torch.randn(B,H,S,D).half()
am=torch.ones(B,S); am[1,:3]=0
i=torch.arange(S)
allowed=(i[None,:]<=i[:,None])[None,None] & am[:,None,None,:].bool()
mn=torch.finfo(torch.float16).min
mask=torch.where(allowed, 0.0, mn).half()
r=probe("fp16 finfo.min left pad", eager_attn, q,k,v,mask)
print((r[0].float()-r[1].float()).abs().amax(dim=(1,3)))
# ttx: expanded k (stride 0 heads)
def sdpa(q,k,v): return F.scaled_dot_product_attention(q,k,v,is_causal=True)
q=torch.randn(B,H,S,D); k1=torch.randn(B,1,S,D); v1=torch.randn(B,1,S,D)
def mqa_expand(q,k1,v1): return sdpa(q,k1.expand(B,H,S,D),v1.expand(B,H,S,D))
for t in ("torch","ttx"):
    probe(f"mqa expand {t}", mqa_expand, q,k1,v1, target=t)
# Sq != Skv with explicit mask (chunked prefill)
Sq,Skv=3,7
def chunk(q,k,v):
    i=torch.arange(Sq)+ (Skv-Sq); j=torch.arange(Skv)
    return F.scaled_dot_product_attention(q,k,v,attn_mask=j[None,:]<=i[:,None])
for t in ("torch","ttx"):
    probe(f"chunked prefill {t}", chunk, torch.randn(B,H,Sq,D), torch.randn(B,H,Skv,D), torch.randn(B,H,Skv,D), target=t)
