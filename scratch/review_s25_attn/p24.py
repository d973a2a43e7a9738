from harness import *
sys.path.insert(0, "/work/main/tests")
from conftest import rel
torch.manual_seed(0)
def swa(q,k,v,W=16):
    S=q.shape[2]; i=torch.arange(S)
    allowed=(i[None,:]<=i[:,None])&(i[None,:]>i[:,None]-W)
    return F.scaled_dot_product_attention(q,k,v,attn_mask=allowed[None,None],enable_gqa=True)
def swa_pad(q,k,v,am,W=16):
    S=q.shape[2]; i=torch.arange(S)
    allowed=((i[None,:]<=i[:,None])&(i[None,:]>i[:,None]-W))[None,None] & am[:,None,None,:].bool()
    return F.scaled_dot_product_attention(q,k,v,attn_mask=allowed,enable_gqa=True)
for t in ("torch","ttx"):
  for S in (67, 16, 17):
    q=torch.randn(2,4,S,40,requires_grad=True); k=torch.randn(2,2,S,40,requires_grad=True); v=torch.randn(2,2,S,40,requires_grad=True)
    torch._dynamo.reset(); mojo_compile.reset_report()
    o=torch.compile(swa,backend="mojo",options={"target":t,"inner_compiler":"eager"})(q,k,v); g=torch.randn_like(o); o.backward(g)
    c=mojo_compile.last_report()
    d=[x.detach().double().requires_grad_() for x in (q,k,v)]; o2=swa(*d); o2.backward(g.double())
    print(t,S,[ (s.op, getattr(s,'detail',None) or '') for s in c.sites][:2], f"out {rel(o,o2):.2g}", [f"{rel(x.grad,y.grad):.2g}" for x,y in zip((q,k,v),d)])
    am=torch.ones(2,S); am[1,:5]=0
    q.grad=k.grad=v.grad=None
    torch._dynamo.reset(); mojo_compile.reset_report()
    o=torch.compile(swa_pad,backend="mojo",options={"target":t,"inner_compiler":"eager"})(q,k,v,am); o.backward(g)
    d=[x.detach().double().requires_grad_() for x in (q,k,v)]; o2=swa_pad(*d,am); o2.backward(g.double())
    print(t,S,"pad",dict(mojo_compile.last_report().counts()), f"out {rel(o,o2):.2g}", [f"{rel(x.grad,y.grad):.2g}" for x,y in zip((q,k,v),d)])
