from harness import *
import functools
torch.manual_seed(0)
def repeat_kv(x,n):
    b,h,s,d=x.shape; return x[:,:,None].expand(b,h,n,s,d).reshape(b,h*n,s,d)
def cap0(q,k,v,mask):
    k,v=repeat_kv(k,2),repeat_kv(v,2)
    w=torch.matmul(q,k.transpose(2,3))*0.35
    w=torch.tanh(w/0.0)*0.0+mask
    return torch.matmul(F.softmax(w,dim=-1,dtype=torch.float32).to(q.dtype),v)
q=torch.randn(2,4,6,8)*4; k=torch.randn(2,2,6,8); v=torch.randn(2,2,6,8)
i=torch.arange(6); mask=torch.where(i[None,:]<=i[:,None],0.0,float("-inf"))[None,None].expand(2,1,6,6).contiguous()
probe("softcap0 inductor", cap0, q,k,v,mask, inner="inductor")
probe("softcap0 bf16", cap0, q.bfloat16(),k.bfloat16(),v.bfloat16(),mask)
def sdpaT(qT,kT,vT): return F.scaled_dot_product_attention(qT.transpose(2,3),kT.transpose(2,3),vT.transpose(2,3),is_causal=True)
a=[torch.randn(2,4,8,6) for _ in range(3)]
probe("transposed dynamic", sdpaT, *a, dynamic=True)
# training with transposed
torch._dynamo.reset()
b=[x.clone().requires_grad_() for x in a]
o=torch.compile(sdpaT,backend="mojo",options={"inner_compiler":"eager"})(*b); o.sum().backward()
c=[x.double().requires_grad_() for x in a]; o2=sdpaT(*c); o2.sum().backward()
print("train transposed: out", (o.double()-o2).abs().max().item(), "grads", [(x.grad.double()-y.grad).abs().max().item() for x,y in zip(b,c)])
