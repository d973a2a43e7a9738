from harness import *
torch.manual_seed(0)
B,H,S,D=2,4,6,8
def rh(x):
    h=x.shape[-1]//2; return torch.cat((-x[..., h:], x[..., :h]), -1)
def rh_inv(x):
    h=x.shape[-1]//2; return torch.cat((x[..., h:], -x[..., :h]), -1)
def rh_chunk(x):
    a,b=x.chunk(2,-1); return torch.cat((-b,a),-1)
def rte(x): return torch.stack((-x[...,1::2], x[...,::2]),-1).flatten(-2)
def rte_inv(x): return torch.stack((x[...,1::2], -x[...,::2]),-1).flatten(-2)
def mk(rot, sign=1, mix=False):
    def f(q,k,cos,sin):
        c,s=cos.unsqueeze(1),sin.unsqueeze(1)
        qo = q*c + sign*rot(q)*s if sign==1 else q*c - rot(q)*s
        ko = k*c + rot(q if mix else k)*s if not mix else k*c + rot(q[:, :k.shape[1]])*s
        return qo, ko
    return f
q=torch.randn(B,H,S,D); k=torch.randn(B,H,S,D); cos=torch.randn(B,S,D); sin=torch.randn(B,S,D)
probe("rh_inv", mk(rh_inv), q,k,cos,sin)
probe("rh minus", mk(rh, -1), q,k,cos,sin)
probe("rh chunk", mk(rh_chunk), q,k,cos,sin)
probe("rh mix q into k", mk(rh, mix=True), q,k,cos,sin)
probe("rte_inv", mk(rte_inv), q,k,cos,sin)
def sep_unsq(q,k,cos,sin):
    return q*cos.unsqueeze(1)+rh(q)*sin.unsqueeze(1), k*cos.unsqueeze(1)+rh(k)*sin.unsqueeze(1)
probe("separate unsqueezes", sep_unsq, q,k,cos,sin)
def diff_tables(q,k,cos,sin):
    c,s=cos.unsqueeze(1),sin.unsqueeze(1)
    return q*c+rh(q)*s, k*s+rh(k)*c
probe("k uses swapped tables", diff_tables, q,k,cos,sin)
def k_other_cos(q,k,cos,sin,cos2):
    c,s=cos.unsqueeze(1),sin.unsqueeze(1); c2=cos2.unsqueeze(1)
    return q*c+rh(q)*s, k*c2+rh(k)*s
probe("k different cos", k_other_cos, q,k,cos,sin,torch.randn(B,S,D))
def q_only(q,cos,sin):
    c,s=cos.unsqueeze(1),sin.unsqueeze(1)
    return q*c+rh(q)*s
probe("q only", q_only, q,cos,sin)
def cos_heads(q,k,cos,sin):  # cos per head [B,H,S,D]
    return q*cos+rh(q)*sin, k*cos+rh(k)*sin
probe("cos per head", cos_heads, q,k,torch.randn(B,H,S,D),torch.randn(B,H,S,D))
def cos_2d(q,k,cos,sin):
    return q*cos+rh(q)*sin, k*cos+rh(k)*sin
probe("cos 2d [S,D]", cos_2d, q,k,cos[0],sin[0])
