from harness import *
torch.manual_seed(0)
B,H,Hk,S,D=2,4,2,5,8
def rotate_half(x):
    h=x.shape[-1]//2; return torch.cat((-x[..., h:], x[..., :h]), -1)
def rms(x,w,eps=1e-6):
    dt=x.dtype; x=x.float(); x=x*torch.rsqrt(x.pow(2).mean(-1,keepdim=True)+eps); return w*x.to(dt)
def qwen3_T(qT,kT,qw,kw,cos,sin):
    q=qT.transpose(-1,-2); k=kT.transpose(-1,-2)  # [B,S,H,D] views with last stride H
    qn=rms(q,qw).transpose(1,2); kn=rms(k,kw).transpose(1,2)
    c,s=cos.unsqueeze(1),sin.unsqueeze(1)
    return qn*c+rotate_half(qn)*s, kn*c+rotate_half(kn)*s
args=(torch.randn(B,S,D,H), torch.randn(B,S,D,Hk), torch.randn(D), torch.randn(D), torch.randn(B,S,D), torch.randn(B,S,D))
for t in ("torch","ttx"):
    probe(f"qwen3 strided {t}", qwen3_T, *args, target=t)
def sinks_T(qT,kT,vT,sinks):
    q,k,v=qT.transpose(2,3),kT.transpose(2,3),vT.transpose(2,3)
    w=torch.matmul(q,k.transpose(2,3))*0.35
    s=sinks.reshape(1,-1,1,1).expand(q.shape[0],-1,q.shape[-2],-1)
    lg=torch.cat([w,s],-1); lg=lg-lg.max(dim=-1,keepdim=True).values
    p=F.softmax(lg,dim=-1,dtype=lg.dtype); return torch.matmul(p[...,:-1],v)
for t in ("torch","ttx"):
    probe(f"sinks strided {t}", sinks_T, torch.randn(B,H,D,S),torch.randn(B,H,D,S),torch.randn(B,H,D,S),torch.randn(H), target=t)
def masked_T(qT,kT,vT,mask):
    return F.scaled_dot_product_attention(qT.transpose(2,3),kT.transpose(2,3),vT.transpose(2,3),attn_mask=mask)
for t in ("torch","ttx"):
    probe(f"sdpa strided w/ mask {t}", masked_T, torch.randn(B,H,D,S),torch.randn(B,H,D,S),torch.randn(B,H,D,S),torch.randn(B,1,S,S), target=t)
