from harness import *
import functools
torch.manual_seed(0)
B,H,Hk,S,D=2,4,2,6,8
def repeat_kv(x,n):
    b,h,s,d=x.shape; return x[:,:,None].expand(b,h,n,s,d).reshape(b,h*n,s,d)
def eager_attn(q,k,v,mask,scale=0.35,softcap=None):
    k=repeat_kv(k,q.shape[1]//k.shape[1]); v=repeat_kv(v,q.shape[1]//v.shape[1])
    w=torch.matmul(q,k.transpose(2,3))*scale
    if softcap is not None: w=torch.tanh(w/softcap)*softcap
    if mask is not None: w=w+mask
    w=F.softmax(w,dim=-1,dtype=torch.float32).to(q.dtype)
    return torch.matmul(w,v)
q=torch.randn(B,H,S,D)*4; k=torch.randn(B,Hk,S,D)*4; v=torch.randn(B,Hk,S,D)
i=torch.arange(S); mask=torch.where(i[None,:]<=i[:,None],0.0,float("-inf"))[None,None].expand(B,1,S,S).clone()
probe("eager softcap 50", functools.partial(eager_attn, softcap=50.0), q,k,v,mask)
probe("eager softcap 0.0", functools.partial(eager_attn, softcap=0.0), q,k,v,mask)
probe("eager softcap -5", functools.partial(eager_attn, softcap=-5.0), q,k,v,mask)
probe("eager scale 0", functools.partial(eager_attn, scale=0.0), q,k,v,mask)
probe("eager scale -0.3", functools.partial(eager_attn, scale=-0.3), q,k,v,mask)
probe("eager softcap inf", functools.partial(eager_attn, softcap=float('inf')), q,k,v,mask)
probe("eager scale inf", functools.partial(eager_attn, scale=float('inf')), q,k,v,mask)
probe("eager scale nan", functools.partial(eager_attn, scale=float('nan')), q,k,v,mask)
def sdpa(q,k,v,scale=None,causal=False, gqa=False):
    return F.scaled_dot_product_attention(q,k,v,is_causal=causal,scale=scale,enable_gqa=gqa)
probe("sdpa scale 0", functools.partial(sdpa, scale=0.0), q,q,q)
probe("sdpa scale inf", functools.partial(sdpa, scale=float('inf')), q,q,q)
probe("sdpa scale -1 causal", functools.partial(sdpa, scale=-1.0, causal=True), q,q,q)
probe("sdpa gqa causal", functools.partial(sdpa, causal=True, gqa=True), q,k,v)
# sinks
def sinks_attn(q,k,v,mask,sinks,scale=0.35):
    k=repeat_kv(k,q.shape[1]//k.shape[1]); v=repeat_kv(v,q.shape[1]//v.shape[1])
    w=torch.matmul(q,k.transpose(2,3))*scale + mask
    s=sinks.reshape(1,-1,1,1).expand(q.shape[0],-1,q.shape[-2],-1)
    lg=torch.cat([w,s],-1); lg=lg-lg.max(dim=-1,keepdim=True).values
    p=F.softmax(lg,dim=-1,dtype=lg.dtype); return torch.matmul(p[...,:-1],v)
sinks=torch.randn(H)
probe("sinks", sinks_attn, q,k,v,mask,sinks)
probe("sinks bf16", sinks_attn, q.bfloat16(),k.bfloat16(),v.bfloat16(),mask.bfloat16(),sinks.bfloat16())
