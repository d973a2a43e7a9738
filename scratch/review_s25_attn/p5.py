from harness import *
import functools
torch.manual_seed(0)
B,H,Hk,S,D=2,4,2,6,8
def repeat_kv(x,n):
    b,h,s,d=x.shape; return x[:,:,None].expand(b,h,n,s,d).reshape(b,h*n,s,d)
def sinks_attn(q,k,v,mask,sinks,scale=0.35):
    k=repeat_kv(k,q.shape[1]//k.shape[1]); v=repeat_kv(v,q.shape[1]//v.shape[1])
    w=torch.matmul(q,k.transpose(2,3))*scale + mask
    s=sinks.reshape(1,-1,1,1).expand(q.shape[0],-1,q.shape[-2],-1)
    lg=torch.cat([w,s],-1); lg=lg-lg.max(dim=-1,keepdim=True).values
    p=F.softmax(lg,dim=-1,dtype=lg.dtype); return torch.matmul(p[...,:-1],v)
def eager_attn(q,k,v,mask,scale=0.35,softcap=None):
    k=repeat_kv(k,q.shape[1]//k.shape[1]); v=repeat_kv(v,q.shape[1]//v.shape[1])
    w=torch.matmul(q,k.transpose(2,3))*scale
    if softcap is not None: w=torch.tanh(w/softcap)*softcap
    if mask is not None: w=w+mask
    w=F.softmax(w,dim=-1,dtype=torch.float32).to(q.dtype)
    return torch.matmul(w,v)
def gradcheck(name, fn, inputs, inner="eager", target="torch"):
    torch._dynamo.reset(); mojo_compile.reset_report()
    a=[t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    b=[t.detach().double().requires_grad_(t.requires_grad) for t in inputs]
    cf=torch.compile(fn, backend="mojo", options={"target":target,"inner_compiler":inner})
    try:
        out=cf(*a); g=torch.randn_like(out); out.backward(g)
    except Exception as e:
        print(f"[{name}] CRASH {type(e).__name__}: {str(e)[:300]}"); return
    counts=mojo_compile.last_report().counts()
    o64=fn(*b); o64.backward(g.double())
    res=[f"out {(out.double()-o64).abs().max().item():.3g}"]
    for i,(x,y) in enumerate(zip(a,b)):
        if x.requires_grad:
            res.append(f"g{i} {(x.grad.double()-y.grad).abs().max().item():.3g}/{y.grad.abs().max().item():.3g}")
    print(f"[{name}] counts={counts} "+" ".join(res))
q=torch.randn(B,H,S,D,requires_grad=True); k=torch.randn(B,Hk,S,D,requires_grad=True); v=torch.randn(B,Hk,S,D,requires_grad=True)
i=torch.arange(S); mask=torch.where(i[None,:]<=i[:,None],0.0,float("-inf"))[None,None].expand(B,1,S,S).clone()
sinks=torch.randn(H,requires_grad=True)
gradcheck("sinks train", sinks_attn, [q,k,v,mask,sinks])
gradcheck("softcap train", functools.partial(eager_attn, softcap=3.0), [q*3,k*3,v,mask])
gradcheck("softcap neg train", functools.partial(eager_attn, softcap=-3.0), [q*3,k*3,v,mask])
gradcheck("sinks train inductor", sinks_attn, [q,k,v,mask,sinks], inner="inductor")
