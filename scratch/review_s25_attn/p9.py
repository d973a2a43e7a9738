from harness import *
torch.manual_seed(0)
def rotate_half(x):
    h=x.shape[-1]//2; return torch.cat((-x[..., h:], x[..., :h]), -1)
def twice(q,k,cos,sin):
    c, s = cos.unsqueeze(1), sin.unsqueeze(1); rot=cos.shape[-1]
    q = torch.cat([q[..., :rot] * c + rotate_half(q[..., :rot]) * s, q[..., rot:]], -1)
    k = torch.cat([k[..., :rot] * c + rotate_half(k[..., :rot]) * s, k[..., rot:]], -1)
    return q,k
def once(q,k,cos,sin):
    c, s = cos.unsqueeze(1), sin.unsqueeze(1); rot=cos.shape[-1]
    qr, kr = q[..., :rot], k[..., :rot]
    q = torch.cat([qr * c + rotate_half(qr) * s, q[..., rot:]], -1)
    k = torch.cat([kr * c + rotate_half(kr) * s, k[..., rot:]], -1)
    return q,k
a=(torch.randn(2,4,7,16), torch.randn(2,2,7,16), torch.randn(2,7,4), torch.randn(2,7,4))
probe("slice twice", twice, *a)
probe("slice once", once, *a)
probe("slice twice inductor", twice, *a, inner="inductor")
