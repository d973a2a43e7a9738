import itertools, sys
from kh import *

torch.manual_seed(0)
bad = 0


def rot64(x, cos, sin, R, inter, seq_dim, last):
    """x [B,H,S,D] or [B,S,H,D] double; cos [B|1,S,R] double."""
    c = cos.unsqueeze(1 if seq_dim == 2 else 2)
    s = sin.unsqueeze(1 if seq_dim == 2 else 2)
    D = x.shape[-1]
    if last:
        passed, r = x[..., :D - R], x[..., D - R:]
    else:
        r, passed = x[..., :R], x[..., R:]
    if inter:
        rh = torch.stack((-r[..., 1::2], r[..., ::2]), -1).flatten(-2)
    else:
        rh = torch.cat((-r[..., R // 2:], r[..., :R // 2]), -1)
    y = r * c + rh * s
    return torch.cat((passed, y) if last else (y, passed), -1)


def qkv_layout(x_bshd, seq_dim, layout):
    """x in [B,S,H,D] logical; return in seq_dim layout with memory layout variants."""
    if seq_dim == 2:
        x = x_bshd.transpose(1, 2)  # typical: view(B,S,H,D).transpose(1,2): non-contiguous
        if layout == "contig":
            x = x.contiguous()
    else:
        x = x_bshd if layout != "padrows" else boxed(x_bshd, "padrows")
    if layout == "offset":
        x = boxed(x.contiguous(), "offset")
    return x


def run_rope(B, S, HQ, HK, D, R, inter, last, seq_dim, layout, qdt, cdt, cos_form):
    global bad
    q0 = torch.randn(B, S, HQ, D, dtype=qdt)
    k0 = torch.randn(B, S, HK, D, dtype=qdt)
    q0, k0 = qkv_layout(q0, seq_dim, layout), qkv_layout(k0, seq_dim, layout)
    ang = torch.randn(B if cos_form == "B" else 1, S if cos_form != "S1" else 1, R)
    cos, sin = ang.cos().to(cdt), ang.sin().to(cdt)
    if cos_form == "2d":
        cos, sin = cos[0], sin[0]
    if cos_form == "bexp":
        cos, sin = cos.expand(B, S, R), sin.expand(B, S, R)
    outs = {}
    gq = gk = None
    for tgt in ("ttx", "torch"):
        q, k = q0.detach().requires_grad_(), k0.detach().requires_grad_()
        try:
            with guarded() if tgt == "ttx" else contextlib.nullcontext():
                qo, ko = mojo.rope(q, k, cos, sin, R, inter, seq_dim, last, tgt)
                if gq is None:
                    gq, gk = torch.randn_like(qo), torch.randn_like(ko)
                grads = torch.autograd.grad((qo, ko), (q, k), (gq, gk))
        except Exception as e:
            print(f"  ERR {tgt} rope B{B} S{S} {HQ}/{HK} D{D} R{R} i{inter} l{last} sd{seq_dim} {layout} {qdt} {cdt} {cos_form}: {type(e).__name__}: {str(e)[:200]}")
            bad += 1
            return
        outs[tgt] = (qo, ko, grads)
    c64 = cos.double() if cos.dim() == 3 else cos.double().unsqueeze(0)
    s64 = sin.double() if sin.dim() == 3 else sin.double().unsqueeze(0)
    q64, k64 = (t.detach().double().requires_grad_() for t in (q0, k0))
    if seq_dim == 2:
        c64b, s64b = c64, s64
    else:
        c64b, s64b = c64, s64
    qo64 = rot64(q64, c64b, s64b, R, inter, seq_dim, last)
    ko64 = rot64(k64, c64b, s64b, R, inter, seq_dim, last)
    g64 = torch.autograd.grad((qo64, ko64), (q64, k64), (gq.double(), gk.double()))
    tag = f"rope B{B} S{S} {HQ}/{HK} D{D} R{R} i{inter} l{last} sd{seq_dim} {layout} {qdt} {cdt} {cos_form}"
    b = check(tag + " q", outs["ttx"][0], qo64, outs["torch"][0])
    b |= check(tag + " k", outs["ttx"][1], ko64, outs["torch"][1])
    b |= check(tag + " gq", outs["ttx"][2][0], g64[0], outs["torch"][2][0])
    b |= check(tag + " gk", outs["ttx"][2][1], g64[1], outs["torch"][2][1])
    if outs["ttx"][0].dtype != outs["torch"][0].dtype or outs["ttx"][2][0].dtype != outs["torch"][2][0].dtype:
        print("  DTYPE", tag); b = True
    bad += b


def run_qk(B, S, HQ, HK, D, R, inter, seq_dim, layout, qdt, wdt, cdt, cast, together, off, eps=1e-6):
    global bad
    q0 = torch.randn(B, S, HQ, D, dtype=qdt) * 2
    k0 = torch.randn(B, S, HK, D, dtype=qdt) * 2
    q0, k0 = qkv_layout(q0, seq_dim, layout), qkv_layout(k0, seq_dim, layout)
    wq0 = (1 + 0.3 * torch.randn(HQ * D if together else D)).to(wdt)
    wk0 = (1 + 0.3 * torch.randn(HK * D if together else D)).to(wdt)
    ang = torch.randn(1, S, R)
    cos, sin = ang.cos().to(cdt), ang.sin().to(cdt)
    outs = {}
    gq = gk = None
    for tgt in ("ttx", "torch"):
        q, k, wq, wk = (t.detach().requires_grad_() for t in (q0, k0, wq0, wk0))
        try:
            with guarded() if tgt == "ttx" else contextlib.nullcontext():
                qo, ko, _, _ = mojo.qk_norm_rope(q, k, wq, wk, eps, off, cast, cos, sin, R, inter, seq_dim, together, tgt)
                if gq is None:
                    gq, gk = torch.randn_like(qo), torch.randn_like(ko)
                grads = torch.autograd.grad((qo, ko), (q, k, wq, wk), (gq, gk))
        except Exception as e:
            print(f"  ERR {tgt} qk: {type(e).__name__}: {str(e)[:300]}")
            bad += 1
            return
        outs[tgt] = (qo, ko, grads)
    leaves = [t.detach().double().requires_grad_() for t in (q0, k0, wq0, wk0)]

    def norm_rope(x, w):
        xs = x if seq_dim == 1 else x.transpose(1, 2)  # BSHD
        rows = xs.reshape(*xs.shape[:2], -1) if together else xs
        y = rows * torch.rsqrt(rows.pow(2).mean(-1, keepdim=True) + eps) * (w + off)
        y = y.view(xs.shape)
        y = rot64(y, cos.double(), sin.double(), R, inter, 1, False)
        return y if seq_dim == 1 else y.transpose(1, 2)
    qo64, ko64 = norm_rope(leaves[0], leaves[2]), norm_rope(leaves[1], leaves[3])
    g64 = torch.autograd.grad((qo64, ko64), leaves, (gq.double(), gk.double()))
    tag = f"qk B{B} S{S} {HQ}/{HK} D{D} R{R} i{inter} sd{seq_dim} {layout} {qdt} w{wdt} c{cdt} {cast} tog={together} off={off}"
    b = check(tag + " q", outs["ttx"][0], qo64, outs["torch"][0])
    b |= check(tag + " k", outs["ttx"][1], ko64, outs["torch"][1])
    for i, n in enumerate(("gq", "gk", "gwq", "gwk")):
        b |= check(tag + " " + n, outs["ttx"][2][i], g64[i], outs["torch"][2][i], tol=1e-5)
    bad += b


which = (sys.argv[1] if len(sys.argv) > 1 else "all") if __name__ == "__main__" else "none"
bf, f16, f32 = torch.bfloat16, torch.float16, torch.float32
if which in ("rope", "all"):
    for D, (S, HQ, HK) in itertools.product((8, 40, 80, 96, 256), [(1, 4, 4), (3, 6, 2), (17, 3, 1)]):
        for R in sorted({D, D // 2 if (D // 2) % 2 == 0 else D - 2, 2}):
            for inter, last in ((False, False), (True, False), (False, True)):
                run_rope(2, S, HQ, HK, D, R, inter, last, 2, "strided", bf, f32, "1")
        run_rope(2, S, HQ, HK, D, D, False, False, 1, "padrows", f16, f16, "B")
        run_rope(2, S, HQ, HK, D, D, True, False, 2, "offset", f32, bf, "2d")
        run_rope(3, S, HQ, HK, D, D, False, False, 2, "contig", bf, bf, "bexp")
        run_rope(2, S, HQ, HK, D, D // 2 // 2 * 2, False, True, 1, "plain", bf, f32, "S1")
    print("rope done", bad, flush=True)
if which in ("qk", "all"):
    for D, (S, HQ, HK) in itertools.product((8, 40, 96, 256), [(1, 4, 4), (3, 6, 2), (17, 3, 1)]):
        for R, inter in ((D, False), (D // 2 // 2 * 2, False), (D, True)):
            run_qk(2, S, HQ, HK, D, R, inter, 2, "strided", bf, bf, f32, "normed", False, 0.0)
        run_qk(2, S, HQ, HK, D, D, False, 1, "padrows", bf, f32, bf, "normed", False, 0.0)
        run_qk(2, S, HQ, HK, D, D, False, 2, "offset", f16, f16, f16, "output", False, 1.0)
        run_qk(2, S, HQ, HK, D, D // 2 // 2 * 2, True, 2, "strided", f32, f32, f32, "output", True, 0.0)
        run_qk(2, S, HQ, HK, D, D, False, 1, "plain", bf, bf, f32, "normed", True, 0.0)
    print("qk done", bad, flush=True)
print("TOTAL BAD", bad)
