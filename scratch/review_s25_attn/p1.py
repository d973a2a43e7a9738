from harness import *
torch.manual_seed(0)
B,H,S,D=2,4,6,8

def rotate_half(x):
    h=x.shape[-1]//2; return torch.cat((-x[..., h:], x[..., :h]), -1)
def rope(q,k,cos,sin):
    c,s=cos.unsqueeze(1),sin.unsqueeze(1)
    return q*c+rotate_half(q)*s, k*c+rotate_half(k)*s
q=torch.randn(B,H,S,D); k=torch.randn(B,2,S,D)
cos=torch.randn(B,S,D); sin=torch.randn(B,S,D)
probe("rope random cos (halves unequal)", rope, q,k,cos,sin)
cos2=torch.cat([cos[...,:4]]*2,-1); sin2=torch.cat([sin[...,:4]]*2,-1)
probe("rope dup halves input", rope, q,k,cos2,sin2)
probe("rope bf16 q fp32 cos", rope, q.bfloat16(),k.bfloat16(),cos2,sin2)
probe("rope bf16 q fp16 cos", rope, q.bfloat16(),k.bfloat16(),cos2.half(),sin2.half())
probe("rope fp32 q, bf16 k", rope, q,k.bfloat16(),cos2,sin2)

def rope_full(q,k,pos):
    inv=1.0/(10000**(torch.arange(0,D,2).float()/D))
    f=pos[:,:,None].float()*inv[None,None,:]
    emb=torch.cat((f,f),-1); cos,sin=emb.cos(),emb.sin()
    return rope(q,k,cos,sin)
pos=torch.arange(S)[None].expand(B,S).clone(); pos[1]-=2
probe("rope_full", rope_full, q,k,pos)
probe("rope_full bf16", rope_full, q.bfloat16(),k.bfloat16(),pos)
def rope_full_cast(q,k,pos):
    inv=1.0/(10000**(torch.arange(0,D,2).float()/D))
    f=pos[:,:,None].float()*inv[None,None,:]
    emb=torch.cat((f,f),-1); cos,sin=emb.cos().to(q.dtype),emb.sin().to(q.dtype)
    return rope(q,k,cos,sin)
probe("rope_full cast bf16", rope_full_cast, q.bfloat16(),k.bfloat16(),pos)
# interleaved with non-repeat cos
def rte(x): return torch.stack((-x[...,1::2], x[...,::2]),-1).flatten(-2)
def ropei(q,k,cos,sin):
    c,s=cos.unsqueeze(1),sin.unsqueeze(1)
    return q*c+rte(q)*s, k*c+rte(k)*s
def ropei_full(q,k,pos):
    inv=1.0/(10000**(torch.arange(0,D,2).float()/D))
    f=pos[:,:,None].float()*inv[None,None,:]
    emb=f.repeat_interleave(2,-1); return ropei(q,k,emb.cos(),emb.sin())
probe("ropei_full", ropei_full, q,k,pos)
def ropei_full_wrong(q,k,pos):  # cat instead of repeat_interleave: halves equal, pairs not
    inv=1.0/(10000**(torch.arange(0,D,2).float()/D))
    f=pos[:,:,None].float()*inv[None,None,:]
    emb=torch.cat((f,f),-1); return ropei(q,k,emb.cos(),emb.sin())
probe("ropei with cat cos (not interleaved)", ropei_full_wrong, q,k,pos)
def rope_full_ri(q,k,pos):  # rotate_half with repeat_interleave cos: pairs equal, halves not
    inv=1.0/(10000**(torch.arange(0,D,2).float()/D))
    f=pos[:,:,None].float()*inv[None,None,:]
    emb=f.repeat_interleave(2,-1); return rope(q,k,emb.cos(),emb.sin())
probe("rotate_half with interleaved cos", rope_full_ri, q,k,pos)
