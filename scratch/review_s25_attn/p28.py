from harness import *
sys.path.insert(0, "/work/main/tests")
from conftest import rel
torch.manual_seed(0)
B,S,H,Hk,D=2,5,4,2,8
def rotate_half(x):
    h=x.shape[-1]//2; return torch.cat((-x[..., h:], x[..., :h]), -1)
def rms(x,w,eps=1e-6):
    dt=x.dtype; x=x.float(); x=x*torch.rsqrt(x.pow(2).mean(-1,keepdim=True)+eps); return w*x.to(dt)
def olmo2(q,k,qw,kw,cos,sin):
    qn=rms(q,qw).view(B,S,-1,D).transpose(1,2); kn=rms(k,kw).view(B,S,-1,D).transpose(1,2)
    c,s=cos.unsqueeze(1),sin.unsqueeze(1)
    return qn*c+rotate_half(qn)*s, kn*c+rotate_half(kn)*s
def grads(name, fn, args, target, dt):
    torch._dynamo.reset(); mojo_compile.reset_report()
    a=[x.to(dt).clone().requires_grad_(i<4) for i,x in enumerate(args)]
    b=[x.double().clone().requires_grad_(i<4) for i,x in enumerate(args)]
    e=[x.to(dt).clone().requires_grad_(i<4) for i,x in enumerate(args)]
    try:
        o=torch.compile(fn,backend="mojo",options={"target":target,"inner_compiler":"eager"})(*a)
    except Exception as ex:
        print(name,"CRASH",str(ex)[:300]); return
    g=[torch.randn_like(x) for x in o]; sum((x*y).sum() for x,y in zip(o,g)).backward()
    o2=fn(*b); sum((x*y.double()).sum() for x,y in zip(o2,g)).backward()
    o3=fn(*e); sum((x*y).sum() for x,y in zip(o3,g)).backward()
    print(name, dict(mojo_compile.last_report().counts()), [o_.dtype for o_ in o]==[o_.dtype for o_ in o3],
          [f"{rel(x,y):.2g}/{rel(z,y):.2g}" for x,y,z in zip(o,o2,o3)],
          [f"{rel(x.grad,y.grad):.2g}/{rel(z.grad,y.grad):.2g}" for x,y,z in zip(a[:4],b[:4],e[:4])])
args=[torch.randn(B,S,H*D), torch.randn(B,S,Hk*D), torch.randn(H*D), torch.randn(Hk*D), torch.randn(B,S,D), torch.randn(B,S,D)]
for t in ("torch","ttx"):
    for dt in (torch.float32, torch.bfloat16):
        grads(f"olmo2 {t} {dt}", olmo2, args, t, dt)
