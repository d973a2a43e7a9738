from harness import *
sys.path.insert(0, "/work/main/tests")
from conftest import rel
import functools
def run(name, fn, args, target="ttx", dtype=torch.float32):
    torch._dynamo.reset(); mojo_compile.reset_report()
    a=[t.detach().to(dtype).requires_grad_(t.is_floating_point() and t.dim()==4 and t.shape[-1]!=t.shape[-2]) for t in args]
    b=[t.detach().double().requires_grad_(t.is_floating_point() and t.dim()==4 and t.shape[-1]!=t.shape[-2]) for t in args]
    e=[t.detach().to(dtype).requires_grad_(t.is_floating_point() and t.dim()==4 and t.shape[-1]!=t.shape[-2]) for t in args]
    try:
        o=torch.compile(fn,backend="mojo",options={"target":target,"inner_compiler":"eager"})(*a)
        g=torch.randn_like(o); o.backward(g)
    except Exception as ex:
        print(f"[{name}] CRASH {type(ex).__name__}: {str(ex)[:400]}"); return
    c=dict(mojo_compile.last_report().counts())
    o2=fn(*b); o2.backward(g.double()); o3=fn(*e); o3.backward(g)
    gs=[(rel(x.grad,y.grad), rel(z.grad,y.grad)) for x,y,z in zip(a,b,e) if x.requires_grad]
    print(f"[{name}] {c} out {rel(o,o2):.2g} (eager {rel(o3,o2):.2g}) grads " + " ".join(f"{p:.2g}/{q:.2g}" for p,q in gs))
def sdpa(q,k,v,causal=True,gqa=False,scale=None): return F.scaled_dot_product_attention(q,k,v,is_causal=causal,enable_gqa=gqa,scale=scale)
def repeat_kv(x,n):
    b,h,s,d=x.shape; return x[:,:,None].expand(b,h,n,s,d).reshape(b,h*n,s,d)
def eager_cap(q,k,v,mask,cap=7.0):
    n=q.shape[1]//k.shape[1]; k=repeat_kv(k,n); v=repeat_kv(v,n)
    w=torch.matmul(q,k.transpose(2,3))*0.2; w=torch.tanh(w/cap)*cap+mask
    return torch.matmul(F.softmax(w,dim=-1,dtype=torch.float32).to(q.dtype),v)
torch.manual_seed(0)
for (B,H,Hk,S,D) in ((1,6,2,67,80),(2,3,1,33,24),(1,2,2,1,16),(1,4,4,130,64)):
    q=torch.randn(B,H,S,D); k=torch.randn(B,Hk,S,D); v=torch.randn(B,Hk,S,D)
    run(f"gqa causal {B,H,Hk,S,D}", functools.partial(sdpa,gqa=True), [q,k,v])
    i=torch.arange(S); am=torch.ones(B,S); am[0,:S//3]=0
    mask=torch.where((i[None,:]<=i[:,None])[None,None]&am[:,None,None,:].bool(),0.0,-1e30)
    run(f"eager cap pad {B,H,Hk,S,D}", eager_cap, [q*2,k*2,v,mask])
    run(f"eager cap pad bf16 {B,H,Hk,S,D}", eager_cap, [q*2,k*2,v,mask.bfloat16()], dtype=torch.bfloat16)
