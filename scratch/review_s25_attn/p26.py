from harness import *
import functools
torch.manual_seed(0)
def cap(q,k,v,mask,c=-5.0):
    w=torch.matmul(q,k.transpose(2,3))*0.35
    w=torch.tanh(w/c)*c+mask
    return torch.matmul(F.softmax(w,dim=-1,dtype=torch.float32).to(q.dtype),v)
q=torch.randn(2,4,6,8)*4; k=torch.randn(2,4,6,8)*4; v=torch.randn(2,4,6,8)
i=torch.arange(6); mask=torch.where(i[None,:]<=i[:,None],0.0,float("-inf"))[None,None].expand(2,1,6,6).contiguous()
for t in ("torch","ttx"):
    probe(f"softcap -5 {t}", cap, q,k,v,mask, target=t)
    probe(f"softcap +5 {t}", functools.partial(cap,c=5.0), q,k,v,mask, target=t)
# training ttx negative cap
torch._dynamo.reset()
a=[x.clone().requires_grad_() for x in (q,k,v)]
o=torch.compile(cap,backend="mojo",options={"target":"ttx","inner_compiler":"eager"})(*a,mask); o.sum().backward()
b=[x.double().requires_grad_() for x in (q,k,v)]; o2=cap(*b,mask.double()); o2.sum().backward()
print("ttx train neg cap:", (o.double()-o2).abs().max().item(), [(x.grad.double()-y.grad).abs().max().item() for x,y in zip(a,b)])
