from harness import *
import copy
sys.path.insert(0, "/work/main/tests")
from conftest import rel
torch.manual_seed(0)
B,S,Hd,H,Hk,D=2,7,32,4,2,8
def rotate_half(x):
    h=x.shape[-1]//2; return torch.cat((-x[..., h:], x[..., :h]), -1)
class RMS(torch.nn.Module):
    def __init__(s,d,off=0.0): super().__init__(); s.w=torch.nn.Parameter(torch.randn(d)*0.1+1); s.off=off
    def forward(s,x):
        dt=x.dtype; x=x.float(); x=x*torch.rsqrt(x.pow(2).mean(-1,keepdim=True)+1e-6); return (x*(s.off+s.w.float())).to(dt)
class Blk(torch.nn.Module):
    def __init__(s, softcap=None, sinks=False, spelling="sdpa"):
        super().__init__()
        s.qkv=torch.nn.Linear(Hd,(H+2*Hk)*D); s.o=torch.nn.Linear(H*D,Hd); s.qn=RMS(D); s.kn=RMS(D)
        s.spelling=spelling; s.softcap=softcap
        s.sinks=torch.nn.Parameter(torch.randn(H)) if sinks else None
    def forward(s,x,pos):
        q,k,v=s.qkv(x).split([H*D,Hk*D,Hk*D],-1)
        q=s.qn(q.view(B,S,H,D)).transpose(1,2); k=s.kn(k.view(B,S,Hk,D)).transpose(1,2); v=v.view(B,S,Hk,D).transpose(1,2)
        inv=1.0/(10000**(torch.arange(0,D,2,device=x.device).float()/D))
        f=pos[:,:,None].float()*inv; emb=torch.cat((f,f),-1); cos,sin=emb.cos().to(x.dtype),emb.sin().to(x.dtype)
        c,sn=cos.unsqueeze(1),sin.unsqueeze(1)
        q=q*c+rotate_half(q)*sn; k=k*c+rotate_half(k)*sn
        if s.spelling=="sdpa":
            o=F.scaled_dot_product_attention(q,k,v,is_causal=True,enable_gqa=True)
        else:
            k=k[:,:,None].expand(B,Hk,H//Hk,S,D).reshape(B,H,S,D); v=v[:,:,None].expand(B,Hk,H//Hk,S,D).reshape(B,H,S,D)
            w=torch.matmul(q,k.transpose(2,3))*D**-0.5
            if s.softcap: w=torch.tanh(w/s.softcap)*s.softcap
            i=torch.arange(S,device=x.device); m=torch.zeros(S,S,dtype=w.dtype,device=x.device).masked_fill(i[None,:]>i[:,None],torch.finfo(w.dtype).min)
            w=w+m
            if s.sinks is not None:
                sk=s.sinks.reshape(1,-1,1,1).expand(B,-1,S,-1); lg=torch.cat([w,sk],-1); lg=lg-lg.max(-1,keepdim=True).values
                p=F.softmax(lg,-1,dtype=lg.dtype)[...,:-1]
            else:
                p=F.softmax(w,-1,dtype=torch.float32).to(q.dtype)
            o=torch.matmul(p,v)
        return s.o(o.transpose(1,2).reshape(B,S,H*D))
def train(name, kw, dtype, target, inner="eager"):
    torch._dynamo.reset(); mojo_compile.reset_report()
    torch.manual_seed(1)
    m=Blk(**kw).to(dtype); g=copy.deepcopy(m).double(); e=copy.deepcopy(m)
    x=torch.randn(B,S,Hd,dtype=dtype); pos=torch.arange(S)[None].expand(B,S).clone(); pos[1]+=3
    cm=torch.compile(m,backend="mojo",options={"target":target,"inner_compiler":inner})
    try:
        out=cm(x,pos); out.float().square().sum().backward()
    except Exception as ex:
        print(f"[{name}] CRASH {type(ex).__name__}: {str(ex)[:300]}"); return
    c=mojo_compile.last_report().counts()
    e(x,pos).float().square().sum().backward(); g(x.double(),pos).square().sum().backward()
    oe=rel(out, g(x.double(),pos)); ee=rel(e(x,pos), g(x.double(),pos))
    worst=max((rel(a.grad,b.grad)/(rel(ea.grad,b.grad)+1e-7), n) for (n,a),(_,b),(_,ea) in zip(m.named_parameters(),g.named_parameters(),e.named_parameters()))
    print(f"[{name}] {dict(c)} out rel {oe:.2g} (eager {ee:.2g}) worst grad ratio {worst[0]:.3g} ({worst[1]})")
for dtype in (torch.float32, torch.bfloat16):
    for kw in ({}, {"spelling":"eager"}, {"spelling":"eager","softcap":2.0}, {"spelling":"eager","sinks":True}):
        for t,inner in (("torch","eager"),("ttx","eager")):
            train(f"{dtype} {kw} {t}", kw, dtype, t, inner)
train("bf16 sdpa torch+inductor", {}, torch.bfloat16, "torch", "inductor")
train("fp32 sinks torch+inductor", {"spelling":"eager","sinks":True}, torch.float32, "torch", "inductor")
