from harness import *
torch.manual_seed(0)
B,H,Hk,S,D=2,4,2,5,8
def rotate_half(x):
    h=x.shape[-1]//2; return torch.cat((-x[..., h:], x[..., :h]), -1)
def rms(x,w,eps):
    dt=x.dtype; x=x.float(); x=x*torch.rsqrt(x.pow(2).mean(-1,keepdim=True)+eps); return w*x.to(dt)
def qwen3(q,k,qw,kw,cos,sin, qeps=1e-6, keps=1e-6):
    qn=rms(q,qw,qeps).transpose(1,2); kn=rms(k,kw,keps).transpose(1,2)
    c,s=cos.unsqueeze(1),sin.unsqueeze(1)
    return qn*c+rotate_half(qn)*s, kn*c+rotate_half(kn)*s
q=torch.randn(B,S,H,D)*3; k=torch.randn(B,S,Hk,D)*3; qw=torch.randn(D); kw=torch.randn(D)
cos=torch.randn(B,S,D); sin=torch.randn(B,S,D)
probe("qwen3 same eps", qwen3, q,k,qw,kw,cos,sin)
import functools
# tiny-norm rows so eps matters
q2=q*1e-3; k2=k*1e-3
probe("qwen3 q eps 1e-6 k eps 1e-2", functools.partial(qwen3, qeps=1e-6, keps=1e-2), q2,k2,qw,kw,cos,sin)
probe("qwen3 q eps 1e-2 k eps 1e-6", functools.partial(qwen3, qeps=1e-2, keps=1e-6), q2,k2,qw,kw,cos,sin)
# Gemma style offset (1+w) on q only
def rms_off(x,w,eps,off):
    dt=x.dtype; x=x.float(); x=x*torch.rsqrt(x.pow(2).mean(-1,keepdim=True)+eps); return (x*(off+w.float())).to(dt)
def gemma3(q,k,qw,kw,cos,sin):
    qn=rms_off(q,qw,1e-6,1.0); kn=rms_off(k,kw,1e-6,0.0)
    c,s=cos.unsqueeze(1),sin.unsqueeze(1)
    return qn*c+rotate_half(qn)*s, kn*c+rotate_half(kn)*s
qb=q.transpose(1,2).contiguous(); kb=k.transpose(1,2).contiguous()
probe("gemma3 offsets differ", gemma3, qb,kb,qw,kw,cos,sin)
def gemma3s(q,k,qw,kw,cos,sin):
    qn=rms_off(q,qw,1e-6,1.0); kn=rms_off(k,kw,1e-6,1.0)
    c,s=cos.unsqueeze(1),sin.unsqueeze(1)
    return qn*c+rotate_half(qn)*s, kn*c+rotate_half(kn)*s
probe("gemma3 same offsets", gemma3s, qb,kb,qw,kw,cos,sin)
# bf16 with different cast conventions for q vs k
def qwen3_mixcast(q,k,qw,kw,cos,sin):
    qn=rms(q,qw,1e-6).transpose(1,2); kn=rms_off(k,kw,1e-6,0.0).transpose(1,2)
    c,s=cos.unsqueeze(1),sin.unsqueeze(1)
    return qn*c+rotate_half(qn)*s, kn*c+rotate_half(kn)*s
probe("qwen3 bf16 mixed cast", qwen3_mixcast, q.bfloat16(),k.bfloat16(),qw.bfloat16(),kw.bfloat16(),cos.bfloat16(),sin.bfloat16())
