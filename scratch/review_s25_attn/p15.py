from harness import *
import math
torch.manual_seed(0)
B,H,S,D=2,4,6,8
q,k,v=(torch.randn(B,H,S,D)*3 for _ in range(3))
i=torch.arange(S); mask=torch.where(i[None,:]<=i[:,None],0.0,-1e4)[None,None].expand(B,1,S,S).contiguous()
def base(q,k,v,mask):
    w=torch.matmul(q,k.transpose(2,3))*0.3+mask
    return torch.matmul(F.softmax(w,dim=-1,dtype=torch.float32),v)
def nodtype(q,k,v,mask):
    w=torch.matmul(q,k.transpose(2,3))*0.3+mask
    return torch.matmul(F.softmax(w,dim=-1),v)
def neg_dims(q,k,v,mask):
    w=torch.matmul(q,k.transpose(-2,-1))*0.3+mask
    return torch.matmul(F.softmax(w,dim=-1,dtype=torch.float32),v)
def at_op(q,k,v,mask):
    w=(q@k.transpose(2,3))*0.3+mask
    return F.softmax(w,dim=-1,dtype=torch.float32)@v
def div(q,k,v,mask):
    w=torch.matmul(q,k.transpose(2,3))/math.sqrt(8)+mask
    return torch.matmul(F.softmax(w,dim=-1,dtype=torch.float32),v)
def nanogpt(q,k,v,causal):
    T=q.shape[2]
    att=(q@k.transpose(-2,-1))*(1.0/math.sqrt(k.size(-1)))
    att=att.masked_fill(causal[:,:,:T,:T]==0, float('-inf'))
    att=F.softmax(att,dim=-1)
    return att@v
causal=torch.tril(torch.ones(S,S)).view(1,1,S,S)
for f in (base,nodtype,neg_dims,at_op,div):
    probe(f.__name__, f, q,k,v,mask)
probe("nanogpt", nanogpt, q,k,v,causal)
probe("base bf16", base, q.bfloat16(),k.bfloat16(),v.bfloat16(),mask)
