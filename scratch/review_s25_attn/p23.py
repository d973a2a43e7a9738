from harness import *
import functools
torch.manual_seed(0)
B,H,S,D=2,3,5,16
def rh(x):
    h=x.shape[-1]//2; return torch.cat((-x[..., h:], x[..., :h]), -1)
def rte(x): return torch.stack((-x[...,1::2], x[...,::2]),-1).flatten(-2)
def partial(q,k,cos,sin,rot_fn=rh,ud=1):
    r=cos.shape[-1]; c,s=cos.unsqueeze(ud),sin.unsqueeze(ud)
    qr,kr=q[...,:r],k[...,:r]
    return torch.cat([qr*c+rot_fn(qr)*s,q[...,r:]],-1), torch.cat([kr*c+rot_fn(kr)*s,k[...,r:]],-1)
for dt in (torch.bfloat16, torch.float16):
  for cdt in (dt, torch.float32):
    for name,fn in (("rh",partial),("rte",functools.partial(partial,rot_fn=rte))):
        for ud,shape in ((1,(B,H,S,D)),(2,(B,S,H,D))):
            a=(torch.randn(shape,dtype=dt), torch.randn(shape,dtype=dt), torch.randn(B,S,6,dtype=cdt), torch.randn(B,S,6,dtype=cdt))
            probe(f"partial {name} ud{ud} {dt} cos {cdt} ttx", functools.partial(fn,ud=ud), *a, target="ttx")
