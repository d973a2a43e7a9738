from harness import *
torch.manual_seed(0)
B,H,S,D=2,4,6,8
def eager(q,k,v,mask):
    w=torch.matmul(q,k.transpose(2,3))*0.35+mask
    return torch.matmul(F.softmax(w,dim=-1,dtype=torch.float32).to(q.dtype),v)
q,k,v=(torch.randn(B,H,S,D) for _ in range(3))
i=torch.arange(S); am=torch.ones(B,S); am[1,:3]=0
allowed=(i[None,:]<=i[:,None])[None,None]&am[:,None,None,:].bool()
m64=torch.zeros(B,1,S,S,dtype=torch.float64).masked_fill(~allowed, torch.finfo(torch.float64).min)
r=probe("fp64 finfo.min mask, fp32 q", eager, q,k,v,m64)
print(r[0][1,0,:3,:3]); print(r[1][1,0,:3,:3])
m64b=torch.zeros(B,1,S,S,dtype=torch.float64).masked_fill(~allowed, -1e200)
probe("fp64 -1e200 mask", eager, q,k,v,m64b)
for t in ("ttx","torch+inductor"):
    tt,_,inner=t.partition("+")
    probe(f"fp64 finfo.min mask {t}", eager, q,k,v,m64, target=tt, inner=inner or "eager")
