import itertools, sys, math
from kh import *

torch.manual_seed(0)
bad = 0
NEG = float("-inf")


def attn64(q, k, v, mask, q_pos, scale, causal, window, softcap, sinks):
    B, HQ, SQ, D = q.shape
    HK, SK = k.shape[1], k.shape[2]
    g = HQ // HK
    kk = k.repeat_interleave(g, 1)
    vv = v.repeat_interleave(g, 1)
    s = (q @ kk.transpose(-1, -2)) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if mask is not None:
        if mask.dtype == torch.bool:
            s = s.masked_fill(~mask, NEG)
        else:
            s = s + mask.double()
    pos = q_pos if q_pos is not None else torch.arange(SK - SQ, SK)
    j = torch.arange(SK)
    allowed = torch.ones(SQ, SK, dtype=torch.bool)
    if causal:
        allowed &= j[None, :] <= pos[:, None]
    if window:
        allowed &= j[None, :] > pos[:, None] - window
    s = s.masked_fill(~allowed, NEG)
    if sinks is not None:
        sk = sinks.double().view(1, HQ, 1, 1).expand(B, HQ, SQ, 1)
        full = torch.cat([s, sk], -1)
        m = full.amax(-1, keepdim=True)
        e = torch.exp(full - m)
        p = (e / e.sum(-1, keepdim=True))[..., :SK]
    else:
        m = s.amax(-1, keepdim=True)
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        e = torch.exp(s - m)
        den = e.sum(-1, keepdim=True)
        p = torch.where(den > 0, e / den.clamp_min(1e-300), torch.zeros_like(e))
    return p @ vv


def lay(x, layout):
    if layout == "bshd":  # [B,S,H,D] storage viewed as [B,H,S,D]
        return x.transpose(1, 2).contiguous().transpose(1, 2)
    if layout == "offset":
        return boxed(x, "offset")
    return x


def run(B, HQ, HK, SQ, SK, D, dt, causal=False, window=0, softcap=0.0, sinks=False, mask=None, qpos=False,
        layout="plain", scale=None, only_fwd=False):
    global bad
    q0 = lay(torch.randn(B, HQ, SQ, D, dtype=dt), layout)
    k0 = lay(torch.randn(B, HK, SK, D, dtype=dt), layout)
    v0 = lay(torch.randn(B, HK, SK, D, dtype=dt), layout)
    scale = scale if scale is not None else D ** -0.5
    sk0 = torch.randn(HQ, dtype=dt) if sinks else None
    m = None
    if mask == "bool4":
        m = torch.rand(B, 1, SQ, SK) > 0.3
    elif mask == "boolkeys":
        m = torch.rand(B, 1, 1, SK) > 0.3
        m[..., -1] = True
    elif mask == "add4":
        m = torch.randn(B, 1, SQ, SK).to(dt)
    elif mask == "add2":
        m = torch.randn(SQ, SK)
    elif mask == "addfmin":
        m = torch.zeros(B, 1, SQ, SK, dtype=dt)
        m[..., ::2] = torch.finfo(dt).min
    elif mask == "boolhead":
        m = torch.rand(B, HQ, SQ, SK) > 0.5
    qp = torch.arange(SK - SQ, SK)[torch.randperm(SQ)] if qpos else None
    gout = torch.randn(B, HQ, SQ, D, dtype=dt)
    outs = {}
    for tgt in ("ttx", "torch"):
        q, k, v = (t.detach().requires_grad_() for t in (q0, k0, v0))
        sk = sk0.detach().requires_grad_() if sinks else None
        leaves = [q, k, v] + ([sk] if sinks else [])
        try:
            with guarded() if tgt == "ttx" else contextlib.nullcontext():
                o, lse = mojo.attention(q, k, v, m, qp, scale, causal, window, softcap, sk, tgt)
                grads = None if only_fwd else torch.autograd.grad(o, leaves, gout)
        except Exception as e:
            print(f"  ERR {tgt} {B},{HQ}/{HK},{SQ}x{SK},D{D} {dt} c{causal} w{window} sc{softcap} s{sinks} {mask} qp{qpos} {layout}: {type(e).__name__}: {str(e)[:300]}")
            bad += 1
            return
        outs[tgt] = (o, grads)
    L = [t.detach().double().requires_grad_() for t in (q0, k0, v0)] + ([sk0.double().requires_grad_()] if sinks else [])
    o64 = attn64(L[0], L[1], L[2], m, qp, scale, causal, window, softcap, L[3] if sinks else None)
    tag = f"attn {B},{HQ}/{HK},{SQ}x{SK},D{D} {dt} c{causal} w{window} sc{softcap} s{sinks} {mask} qp{qpos} {layout}"
    b = check(tag + " o", outs["ttx"][0], o64, outs["torch"][0], tol=1e-5)
    if not only_fwd:
        g64 = torch.autograd.grad(o64, L, gout.double(), allow_unused=True)
        for i, n in enumerate(("dq", "dk", "dv", "dsink")[:len(L)]):
            b |= check(tag + " " + n, outs["ttx"][1][i], g64[i], outs["torch"][1][i], tol=1e-5)
    bad += b


which = sys.argv[1] if len(sys.argv) > 1 and __name__ == "__main__" else ("all" if __name__ == "__main__" else "none")
bf, f16, f32 = torch.bfloat16, torch.float16, torch.float32
if which in ("shapes", "all"):
    for D, (SQ, SK), (HQ, HK) in itertools.product((8, 40, 80, 96, 256), [(1, 1), (1, 17), (3, 3), (17, 17), (3, 65), (65, 65)], [(2, 2), (6, 2), (3, 1)]):
        run(1, HQ, HK, SQ, SK, D, bf, causal=SQ <= SK and (SQ + SK) % 2 == 0)
    print("shapes done", bad, flush=True)
if which in ("feat", "all"):
    for (SQ, SK), dt in itertools.product([(1, 17), (3, 20), (17, 17), (33, 40)], (bf, f16, f32)):
        run(2, 4, 2, SQ, SK, 40, dt, causal=True, window=5)
        run(2, 4, 2, SQ, SK, 40, dt, softcap=5.0, sinks=True, layout="bshd")
        run(2, 4, 2, SQ, SK, 40, dt, mask="bool4", layout="offset")
        run(2, 4, 2, SQ, SK, 40, dt, mask="boolkeys", causal=True)
        run(2, 4, 2, SQ, SK, 40, dt, mask="add4", qpos=True, causal=True)
        run(2, 4, 2, SQ, SK, 40, dt, mask="add2")
        run(2, 4, 2, SQ, SK, 40, dt, mask="addfmin")
        run(2, 4, 2, SQ, SK, 40, dt, mask="boolhead", sinks=True)
        run(2, 4, 2, SQ, SK, 40, dt, causal=True, qpos=True, window=3, sinks=True, softcap=3.0)
    print("feat done", bad, flush=True)
print("TOTAL BAD", bad)
