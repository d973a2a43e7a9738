from harness import *
sys.path.insert(0, "/work/main/tests")
from conftest import rel
torch.manual_seed(0)
B,H,S,D=2,4,6,8
def rotate_half(x):
    h=x.shape[-1]//2; return torch.cat((-x[..., h:], x[..., :h]), -1)
def rope(q,k,cos,sin):
    c,s=cos.unsqueeze(1),sin.unsqueeze(1)
    return q*c+rotate_half(q)*s, k*c+rotate_half(k)*s
def tied(x,cos,sin):
    q,k=rope(x,x,cos,sin)
    return F.scaled_dot_product_attention(q,k,x,is_causal=True)
def grad_cmp(name, fn, inputs, **kw):
    torch._dynamo.reset(); mojo_compile.reset_report()
    a=[t.detach().clone().requires_grad_(t.is_floating_point() and i==0) for i,t in enumerate(inputs)]
    b=[t.detach().double().requires_grad_(t.is_floating_point() and i==0) for i,t in enumerate(inputs)]
    try:
        o=torch.compile(fn,backend="mojo",options={"target":kw.get("target","torch"),"inner_compiler":"eager"},dynamic=kw.get("dynamic"))(*a)
        o.square().sum().backward()
    except Exception as e:
        print(f"[{name}] CRASH {type(e).__name__}: {str(e)[:300]}"); return
    c=mojo_compile.last_report().counts()
    o2=fn(*b); o2.square().sum().backward()
    print(f"[{name}] {dict(c)} out {rel(o,o2):.2g} grad {rel(a[0].grad,b[0].grad):.2g}")
x=torch.randn(B,H,S,D); cos=torch.randn(B,S,D); sin=torch.randn(B,S,D)
grad_cmp("tied q=k rope", tied, [x,cos,sin])
grad_cmp("tied q=k rope ttx", tied, [x,cos,sin], target="ttx")
grad_cmp("tied q=k rope dyn", tied, [x,cos,sin], dynamic=True)
def qkv_same(x): return F.scaled_dot_product_attention(x,x,x,is_causal=True)
grad_cmp("x,x,x sdpa", qkv_same, [x])
grad_cmp("x,x,x sdpa ttx", qkv_same, [x], target="ttx")
def inplace_scale(q,k,v):
    q.mul_(0.5)
    return F.scaled_dot_product_attention(q,k,v)
q,k,v=(torch.randn(B,H,S,D) for _ in range(3))
qa=q.clone(); qb=q.clone()
torch._dynamo.reset(); mojo_compile.reset_report()
got=torch.compile(inplace_scale,backend="mojo",options={"inner_compiler":"eager"})(qa,k,v)
ref=inplace_scale(qb,k,v)
print("inplace", mojo_compile.last_report().counts(), (got-ref).abs().max().item(), torch.equal(qa,qb))
def rope_then_inplace(q,k,cos,sin):
    qe,ke=rope(q,k,cos,sin)
    q.add_(1.0)  # mutate the input after rope read it
    return qe,ke,q*2
qa=x.clone(); qb=x.clone()
torch._dynamo.reset(); mojo_compile.reset_report()
got=torch.compile(rope_then_inplace,backend="mojo",options={"inner_compiler":"eager"})(qa,x.clone(),cos,sin)
ref=rope_then_inplace(qb,x.clone(),cos,sin)
print("rope then inplace", mojo_compile.last_report().counts(), [ (g-r).abs().max().item() for g,r in zip(got,ref)], torch.equal(qa,qb))
def rope_out_inplace(q,k,cos,sin):
    qe,ke=rope(q,k,cos,sin)
    qe.mul_(2); ke.add_(qe)
    return qe,ke
probe("rope out inplace", rope_out_inplace, x, x.clone(), cos, sin)
