import sys
import torch
import torch.nn.functional as F
from h import safe

T = sys.argv[1] if len(sys.argv) > 1 else "torch"
WHICH = sys.argv[2] if len(sys.argv) > 2 else "all"
V, Hd = 11, 8
WLM = torch.randn(V, Hd) / 3
WQ, WK, WV = (torch.randn(6, Hd) / 3 for _ in range(3))


def ce_hf(logits, labels):
    logits = logits.float()
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-100, reduction="mean")


def ce_shift(logits, labels):
    # HF ForCausalLMLoss: pad then shift
    labels = F.pad(labels, (0, 1), value=-100)
    shift = labels[..., 1:].contiguous()
    logits = logits.float().view(-1, logits.shape[-1])
    return F.cross_entropy(logits, shift.view(-1), ignore_index=-100, reduction="sum") / 3.0


def ce_none(logits, labels):
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-100, reduction="none")


def lce(h, w, labels):
    logits = F.linear(h, w)
    return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-100)


def mk_ce(s):
    B, S = s
    lab = torch.randint(0, V, (B, S))
    if B * S > 1:
        lab.view(-1)[:: 3] = -100
    return [torch.randn(B, S, V) * 2, lab]


def mk_lce(s):
    B, S = s
    lab = torch.randint(0, V, (B, S))
    if B * S > 1:
        lab.view(-1)[:: 3] = -100
    return [torch.randn(B, S, Hd), WLM.clone(), lab]


def dec_qkv(x, WQ, WK, WV):
    with torch.no_grad():
        return F.linear(x, WQ), F.linear(x, WK), x @ WV.t()


def dec_gated(x, WQ, WK, WV):
    with torch.no_grad():
        return F.silu(F.linear(x, WQ)) * F.linear(x, WK)


def dec_view(x, WQ, WK, WV):
    with torch.no_grad():
        b, s, h = x.shape
        return F.linear(x.view(b * s, h), WQ).view(b, s, -1)


def mk_dec(s):
    B, S = s
    return [torch.randn(B, S, Hd), WQ.clone(), WK.clone(), WV.clone()]


seqs = [(2, 7), (2, 9), (2, 1), (2, 33), (1, 33), (3, 5)]
decs = [(1, 1), (2, 1), (3, 1), (4, 1), (1, 1), (2, 2), (1, 4), (5, 1), (2, 1)]
cases = {"ce_hf": (ce_hf, mk_ce, seqs), "ce_shift": (ce_shift, mk_ce, seqs), "ce_none": (ce_none, mk_ce, seqs),
         "lce": (lce, mk_lce, seqs), "dec_qkv": (dec_qkv, mk_dec, decs), "dec_gated": (dec_gated, mk_dec, decs),
         "dec_view": (dec_view, mk_dec, decs)}
if __name__ == "__main__":
    for name, (fn, mk, shapes) in cases.items():
        if WHICH != "all" and name not in WHICH.split(","):
            continue
        g = not name.startswith("dec")
        safe(name + "-seq", fn, mk, shapes, target=T, mode="auto", grad=g)
        safe(name + "-zero", fn, mk, [(2, 7), (2, 9), (2, 0)], target=T, mode="auto", grad=g)
        safe(name + "-dyn", fn, mk, shapes[:4], target=T, mode="dyn", grad=g)
        safe(name + "-mark", fn, mk, shapes[:4], target=T, mode="mark", mark=([(0, 0), (0, 1), (len(mk((1, 1))) - 1, 0), (len(mk((1, 1))) - 1, 1)] if g else [(0, 0)]), grad=g)
