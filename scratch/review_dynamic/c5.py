import sys
import torch
import torch.nn.functional as F
from h import safe
from c1 import rms

T = sys.argv[1] if len(sys.argv) > 1 else "torch"
WHICH = sys.argv[2] if len(sys.argv) > 2 else "all"
V = 11


def rms_eps(x, w, eps: float):
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def mk_rms_eps(s):
    B, S, Hh, eps = s
    return [torch.randn(B, S, Hh), torch.randn(Hh) + 1, eps]


def ce_ii(logits, labels, ii: int):
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=ii)


def mk_ce_ii(s):
    B, S, ii = s
    lab = torch.randint(0, V, (B, S))
    lab.view(-1)[::3] = ii
    return [torch.randn(B, S, V), lab, ii]


def ce_ls(logits, labels, ls: float):
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), label_smoothing=ls)


def mk_ce_ls(s):
    B, S, ls = s
    return [torch.randn(B, S, V), torch.randint(0, V, (B, S)), ls]


def sdpa_scale(q, k, v, scale: float):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)


def mk_sc(s):
    B, S, sc = s
    return [torch.randn(B, 2, S, 8) for _ in range(3)] + [sc]


def rms_T(x, w):  # non-contiguous input
    return rms(x.transpose(0, 1), w)


def rms_slice(x, w):  # a column slice of a wider tensor: row stride != H
    return rms(x[..., : w.shape[0]], w)


def mk_T(s):
    B, S, Hh = s
    return [torch.randn(S, B, Hh), torch.randn(Hh) + 1]


def mk_slice(s):
    B, S, Hh = s
    return [torch.randn(B, S, Hh + 3), torch.randn(Hh) + 1]


def swiglu_split(gu, i: int):
    g, u = gu.split(i, dim=-1)
    return F.silu(g) * u


def mk_split(s):
    B, S, I = s
    return [torch.randn(B, S, 2 * I), I]


def glu_slice(gu):
    i = gu.shape[-1] // 2
    return F.silu(gu[..., :i]) * gu[..., i:]


def glu_interleaved(gu):
    return F.silu(gu[..., ::2]) * gu[..., 1::2]


def mk_ch(s):
    B, S, I = s
    return [torch.randn(B, S, 2 * I)]


class HFNorm(torch.nn.Module):
    def __init__(self, h):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(h) + 1)
        self.variance_epsilon = 1e-6

    def forward(self, x):
        dt = x.dtype
        x = x.to(torch.float32)
        var = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(var + self.variance_epsilon)
        return self.weight * x.to(dt)


cases = {
    "rms_eps": (rms_eps, mk_rms_eps, [(2, 7, 16, 1e-6), (2, 9, 16, 1e-6), (2, 9, 16, 1e-5), (2, 4, 16, 0.5), (3, 33, 16, 1e-6)]),
    "ce_ii": (ce_ii, mk_ce_ii, [(2, 7, -100), (2, 9, -100), (2, 9, 3), (2, 5, 5), (3, 33, -1), (2, 4, -100)]),
    "ce_ls": (ce_ls, mk_ce_ls, [(2, 7, 0.0), (2, 9, 0.1), (2, 5, 0.3), (3, 6, 0.0)]),
    "sdpa_scale": (sdpa_scale, mk_sc, [(2, 7, 0.3), (2, 9, 0.3), (2, 9, 0.5), (3, 5, 1.0)]),
    "rms_T": (rms_T, mk_T, [(2, 7, 16), (2, 9, 16), (3, 9, 24), (1, 5, 8)]),
    "rms_slice": (rms_slice, mk_slice, [(2, 7, 16), (2, 9, 16), (3, 9, 24), (1, 5, 8)]),
    "split": (swiglu_split, mk_split, [(2, 7, 6), (2, 9, 6), (2, 9, 10), (3, 4, 3)]),
    "glu_slice": (glu_slice, mk_ch, [(2, 7, 6), (2, 9, 6), (2, 9, 10), (3, 4, 3)]),
    "glu_inter": (glu_interleaved, mk_ch, [(2, 7, 6), (2, 9, 6), (2, 9, 10), (3, 4, 3)]),
}
if __name__ == "__main__":
    for name, (fn, mk, shapes) in cases.items():
        if WHICH != "all" and name not in WHICH.split(","):
            continue
        safe(name + "-seq", fn, mk, shapes, target=T, mode="auto")
        safe(name + "-dyn", fn, mk, shapes, target=T, mode="dyn")
    if WHICH in ("all", "hf"):
        torch.manual_seed(0)
        m = HFNorm(16)
        safe("hfnorm-dyn", m, lambda s: [torch.randn(*s)], [(2, 7, 16), (2, 9, 16), (3, 1, 16)], target=T, mode="dyn",
             params=list(m.parameters()))
        safe("hfnorm-seq", m, lambda s: [torch.randn(*s)], [(2, 7, 16), (2, 9, 16), (3, 1, 16), (1, 4, 16)], target=T,
             mode="auto", params=list(m.parameters()))
