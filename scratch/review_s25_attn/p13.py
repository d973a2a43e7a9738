from harness import *
torch.manual_seed(0)
B,H,S,D=2,4,6,8
def rotate_half(x):
    h=x.shape[-1]//2; return torch.cat((-x[..., h:], x[..., :h]), -1)
def rope(q,k,cos,sin):
    c,s=cos.unsqueeze(1),sin.unsqueeze(1)
    return q*c+rotate_half(q)*s, k*c+rotate_half(k)*s
def tied(x,cos,sin): return rope(x,x,cos,sin)
x=torch.randn(B,H,S,D); cos=torch.randn(B,S,D); sin=torch.randn(B,S,D)
probe("rope dyn input cos", rope, x, torch.randn(B,2,S,D), cos, sin, dynamic=True)
probe("rope tied static", tied, x, cos, sin)
probe("rope tied dyn", tied, x, cos, sin, dynamic=True)
def rope_full(q,k,pos):
    inv=1.0/(10000**(torch.arange(0,D,2).float()/D))
    f=pos[:,:,None].float()*inv[None,None,:]
    emb=torch.cat((f,f),-1); return rope(q,k,emb.cos(),emb.sin())
pos=torch.arange(S)[None].expand(B,S).clone()
probe("rope_full dyn", rope_full, x, torch.randn(B,2,S,D), pos, dynamic=True)
