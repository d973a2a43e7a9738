from harness import *
import functools
torch.manual_seed(0)
B,H,S,D=2,4,5,8
def rotate_half(x):
    h=x.shape[-1]//2; return torch.cat((-x[..., h:], x[..., :h]), -1)
def prope(q,k,cos,sin,ud=2):
    c, s = cos.unsqueeze(ud), sin.unsqueeze(ud); rot=cos.shape[-1]
    q = torch.cat([q[..., :rot] * c + rotate_half(q[..., :rot]) * s, q[..., rot:]], -1)
    k = torch.cat([k[..., :rot] * c + rotate_half(k[..., :rot]) * s, k[..., rot:]], -1)
    return q,k
cos = torch.randn(B, S, 4); sin = torch.randn(B, S, 4)
probe("partial bshd", prope, torch.randn(B,S,H,D), torch.randn(B,S,H,D), cos, sin)
probe("partial bhsd", functools.partial(prope, ud=1), torch.randn(B,H,S,D), torch.randn(B,H,S,D), cos, sin)
cos = torch.randn(B, S, 6); sin = torch.randn(B, S, 6)
probe("partial bhsd rot6 D8", functools.partial(prope, ud=1), torch.randn(B,H,S,D), torch.randn(B,H,S,D), cos, sin)
cos = torch.randn(B, S, 16); sin = torch.randn(B, S, 16)
probe("partial bhsd rot16 D32", functools.partial(prope, ud=1), torch.randn(B,H,S,32), torch.randn(B,H,S,32), cos, sin)
