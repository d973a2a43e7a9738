import sys; sys.path.insert(0, ".")
from h import probe
import torch, torch.nn.functional as F
torch.manual_seed(0)
H = 64

def rms_mid_write(x, w):  # fp32: x.float() vanishes; x written between the mean and the multiply
    x = x.clone()
    ms = x.pow(2).mean(-1, keepdim=True)
    x.mul_(2)
    return w * (x * torch.rsqrt(ms + 1e-6))
def rms_mid_write_input(x, w):
    ms = x.pow(2).mean(-1, keepdim=True)
    x.mul_(2)
    return w * (x * torch.rsqrt(ms + 1e-6))
def gated_mid_write(g, u):
    u = u.clone()
    a = F.silu(g)
    u.add_(1)
    return a * u
def gated_mid_write_gate(g, u):
    g = g.clone()
    a = F.silu(g)
    g.add_(1)   # g is the pattern input, read by silu before the write
    return a * u
def add_norm_mid_write(x, r, w):
    x = x.clone()
    h = x + r
    x.mul_(2)
    return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)), h
def ln_cohere_mid(x, w):
    h = x.clone()
    mean = h.mean(-1, keepdim=True)
    h.add_(1)
    var = (h - mean).pow(2).mean(-1, keepdim=True)
    return w * ((h - mean) * torch.rsqrt(var + 1e-5))
def fused_mid(gu):
    gu = gu.clone()
    a, b = gu.chunk(2, -1)
    s = F.silu(a)
    gu.mul_(3)
    return s * b

x = torch.randn(3, 5, H); w = 1 + 0.3 * torch.randn(H); g = torch.randn(3, 5, H); u = torch.randn(3, 5, H)
probe("rms_mid_write", rms_mid_write, (x, w))
probe("rms_mid_write_input", rms_mid_write_input, (x, w))
probe("gated_mid_write", gated_mid_write, (g, u))
probe("gated_mid_write_gate", gated_mid_write_gate, (g, u))
probe("add_norm_mid_write", add_norm_mid_write, (x, u, w))
probe("ln_cohere_mid", ln_cohere_mid, (x, w))
probe("fused_mid", fused_mid, (torch.randn(3, 5, 2 * H),))
