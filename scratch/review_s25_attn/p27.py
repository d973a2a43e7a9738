from harness import *
import functools
torch.manual_seed(0)
def cap(q,k,v,mask,c=-5.0,scale=0.35):
    w=torch.matmul(q,k.transpose(2,3))*scale
    if c is not None: w=torch.tanh(w/c)*c
    w=w+mask
    return torch.matmul(F.softmax(w,dim=-1,dtype=torch.float32).to(q.dtype),v)
def sdpa(q,k,v,scale): return F.scaled_dot_product_attention(q,k,v,scale=scale,is_causal=True)
q1=torch.randn(2,4,1,8)*4; k=torch.randn(2,4,6,8)*4; v=torch.randn(2,4,6,8)
probe("decode-shape neg cap ttx", cap, q1,k,v,torch.zeros(2,1,1,6), target="ttx")
q=torch.randn(2,4,6,8)*4; mask=torch.zeros(2,1,6,6)
for s in (-0.35, 0.0):
    probe(f"scale {s} ttx eager", functools.partial(cap,c=None,scale=s), q,k,v,mask, target="ttx")
    probe(f"scale {s} ttx sdpa", functools.partial(sdpa,scale=s), q,k,v, target="ttx")
    probe(f"scale {s} ttx eager cap", functools.partial(cap,c=5.0,scale=s), q,k,v,mask, target="ttx")
