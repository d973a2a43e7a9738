import sys
import torch
import torch.nn.functional as F
from h import safe

T = sys.argv[1] if len(sys.argv) > 1 else "torch"


def rms(x, w):
    input_dtype = x.dtype
    x = x.to(torch.float32)
    var = x.pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(var + 1e-6)
    return w * x.to(input_dtype)


def add_rms(x, r, w):
    h = x + r
    return rms(h, w), h


def add_rms_used(x, r, w):
    h = x + r
    n = rms(h, w)
    return n * 2 + h


def ln(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def swiglu(g, u):
    return F.silu(g) * u


def geglu(g, u):
    return F.gelu(g, approximate="tanh") * u


def chunked(gu):
    g, u = gu.chunk(2, dim=-1)
    return F.silu(g) * u


def chunked_mlp(x, wgu, wd):
    gu = x @ wgu.t()
    g, u = gu.chunk(2, dim=-1)
    return (F.silu(g) * u) @ wd.t()


def mk_rms(s):
    B, S, H = s
    return [torch.randn(B, S, H), torch.randn(H) + 1]


def mk_add(s):
    B, S, H = s
    return [torch.randn(B, S, H), torch.randn(B, S, H), torch.randn(H) + 1]


def mk_ln(s):
    B, S, H = s
    return [torch.randn(B, S, H), torch.randn(H) + 1, torch.randn(H)]


def mk_gu(s):
    B, S, I = s
    return [torch.randn(B, S, I), torch.randn(B, S, I)]


def mk_ch(s):
    B, S, I = s
    return [torch.randn(B, S, 2 * I)]


def mk_mlp(s):
    B, S, H = s
    return [torch.randn(B, S, H), torch.randn(2 * 12, H) / 4, torch.randn(H, 12) / 4]


seqs = [(2, 7, 16), (2, 9, 16), (2, 1, 16), (2, 33, 16), (1, 33, 16), (3, 5, 16)]
hid = [(2, 7, 16), (2, 7, 24), (2, 7, 5), (2, 7, 1)]
zero = [(2, 7, 16), (2, 9, 16), (2, 0, 16), (0, 3, 16)]

if __name__ == "__main__":
  for name, fn, mk in [("rms", rms, mk_rms), ("add_rms", add_rms, mk_add), ("add_rms_used", add_rms_used, mk_add),
                     ("ln", ln, mk_ln), ("swiglu", swiglu, mk_gu), ("geglu", geglu, mk_gu),
                     ("chunked", chunked, mk_ch), ("chunked_mlp", chunked_mlp, mk_mlp)]:
      safe(name + "-seq", fn, mk, seqs, target=T, mode="auto")
      if name != "chunked_mlp":
          safe(name + "-hid", fn, mk, hid, target=T, mode="auto")
      safe(name + "-zero", fn, mk, zero, target=T, mode="auto")
      safe(name + "-dyn", fn, mk, seqs[:3], target=T, mode="dyn")
      safe(name + "-mark", fn, mk, seqs[:3], target=T, mode="mark", mark="all")
