from kh import *
import p4_attn as P
torch.manual_seed(2)
B, HQ, HK, D, SQ, SK = 1, 2, 2, 32, 33, 40
for mag in (1, 10, 30, 100, 1000):
    q = torch.randn(B, HQ, SQ, D); k = torch.randn(B, HK, SK, D); v = torch.randn(B, HK, SK, D)
    sc = mag / (D ** 0.5)
    go = torch.randn(B, HQ, SQ, D)
    res = {}
    for tgt in ("ttx", "torch"):
        qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
        o, _ = mojo.attention(qq, kk, vv, None, None, sc, True, 0, 0.0, None, tgt)
        res[tgt] = (o, *torch.autograd.grad(o, (qq, kk, vv), go))
    L = [t.double().requires_grad_() for t in (q, k, v)]
    o64 = P.attn64(*L, None, None, sc, True, 0, 0.0, None)
    g = torch.autograd.grad(o64, L, go.double())
    print(f"score std ~{mag}: " + "  ".join(f"{n} ttx {rel(res['ttx'][i], r):.2e} torch {rel(res['torch'][i], r):.2e}" for i, (n, r) in enumerate(zip(("o", "dq", "dk", "dv"), (o64, *g)))))
