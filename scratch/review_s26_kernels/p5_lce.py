import itertools, sys
import torch.nn.functional as F
from kh import *
from mojo_compile.ops import linear_cross_entropy as L

torch.manual_seed(0)
bad = 0


def run(n, h, v, dt, reduction="mean", softcap=0.0, scale=1.0, div=1.0, ls=0.0, ignore=True, unit=True,
        layout="plain", chunk_bytes=None, grad_lse=False):
    global bad
    hid0 = torch.randn(n, h, dtype=dt)
    w0 = (torch.randn(v, h) * 0.3).to(dt)
    if layout == "ht":
        hid0 = hid0.t().contiguous().t()
    elif layout == "wt":
        w0 = w0.t().contiguous().t()
    labels = torch.randint(0, v, (n,))
    if ignore:
        labels[::3] = -100
    gl = torch.tensor(0.7) if reduction != "none" else torch.linspace(0.2, 1.3, n)
    glse = torch.linspace(-0.5, 0.5, n) if grad_lse else None
    outs = {}
    old = L.LCE_CHUNK_BYTES
    if chunk_bytes:
        L.LCE_CHUNK_BYTES = chunk_bytes
    try:
        for tgt in ("ttx", "torch"):
            hh, ww = hid0.detach().requires_grad_(), w0.detach().requires_grad_()
            snap = (hh.detach().clone(), ww.detach().clone())
            with guarded() if tgt == "ttx" else contextlib.nullcontext():
                loss, lse, _, _ = mojo.linear_cross_entropy(hh, ww, labels, -100, reduction, unit and reduction != "none",
                                                            unit and reduction != "none", softcap, scale, div, ls, tgt)
                outs_ = (loss, lse) if grad_lse else (loss,)
                gr = (gl, glse) if grad_lse else (gl,)
                grads = torch.autograd.grad(outs_, (hh, ww), gr)
            if not (torch.equal(snap[0], hh.detach()) and torch.equal(snap[1], ww.detach())):
                print("  MUTATED lce"); bad += 1
            outs[tgt] = (loss, lse, grads)
    finally:
        L.LCE_CHUNK_BYTES = old
    h64, w64 = hid0.detach().requires_grad_(), w0.detach().requires_grad_()
    z = F.linear(h64, w64)  # eager spelling in dtype
    if scale != 1:
        z = z * scale
    if div != 1:
        z = z / div
    if softcap:
        z = torch.tanh(z / softcap) * softcap
    z64 = z.double()
    l64 = F.cross_entropy(z64, labels, ignore_index=-100, reduction=reduction, label_smoothing=ls)
    lse64 = torch.logsumexp(z64, -1)
    # fp64 of the exact math from the dtype inputs
    H64, W64 = hid0.double().requires_grad_(), w0.double().requires_grad_()
    zz = H64 @ W64.t() * scale / div
    if softcap:
        zz = torch.tanh(zz / softcap) * softcap
    L64 = F.cross_entropy(zz, labels, ignore_index=-100, reduction=reduction, label_smoothing=ls)
    LSE64 = torch.logsumexp(zz, -1)
    G64 = torch.autograd.grad((L64, LSE64) if grad_lse else (L64,), (H64, W64),
                              (gl.double(), glse.double()) if grad_lse else (gl.double(),))
    tag = f"lce {n}x{h}x{v} {dt} {reduction} sc{softcap} s{scale} d{div} ls{ls} unit{unit} {layout} cb{chunk_bytes} glse{grad_lse}"
    b = check(tag + " loss", outs["ttx"][0], L64, outs["torch"][0], tol=1e-5)
    b |= check(tag + " lse", outs["ttx"][1], LSE64, outs["torch"][1], tol=1e-5)
    b |= check(tag + " dh", outs["ttx"][2][0], G64[0], outs["torch"][2][0], tol=1e-5)
    b |= check(tag + " dw", outs["ttx"][2][1], G64[1], outs["torch"][2][1], tol=1e-5)
    bad += b


bf, f16, f32 = torch.bfloat16, torch.float16, torch.float32
for dt in (bf, f32, f16):
    for n, h, v in ((1, 1, 1), (3, 17, 5), (7, 40, 257), (5, 33, 20001)):
        run(n, h, v, dt)
        run(n, h, v, dt, reduction="sum", softcap=3.0, ls=0.1, layout="ht")
        run(n, h, v, dt, reduction="none", scale=0.5, div=3.0, layout="wt")
        run(n, h, v, dt, reduction="mean", grad_lse=True, unit=False)
        run(n, h, v, dt, chunk_bytes=2 * v * 2, softcap=2.0)  # several chunks
        run(n, h, v, dt, reduction="sum", chunk_bytes=3 * v * 4, ls=0.2, scale=2.0)
print("TOTAL BAD", bad)
