from kh import *
torch.manual_seed(0)
for qs, ks in (((2, 4, 3, 16), (2, 2, 5, 16)), ((2, 4, 5, 16), (2, 2, 3, 16))):
    q, k = torch.randn(qs), torch.randn(ks)
    ang = torch.randn(1, 1, 16)
    cos, sin = ang.cos(), ang.sin()
    wq, wk = torch.ones(16), torch.ones(16)
    res = {}
    for tgt in ("ttx", "torch"):
        try:
            with guarded() if tgt == "ttx" else contextlib.nullcontext():
                res[tgt] = mojo.qk_norm_rope(q, k, wq, wk, 1e-6, 0.0, "normed", cos, sin, 16, False, 2, False, tgt)
        except Exception as e:
            res[tgt] = e
    print(qs, ks, {t: (type(v).__name__ + ": " + str(v)[:120]) if isinstance(v, Exception) else [x.shape for x in v] for t, v in res.items()})
    if not any(isinstance(v, Exception) for v in res.values()):
        print("  k max diff", (res["ttx"][1] - res["torch"][1]).abs().max())
