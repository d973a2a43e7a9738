from kh import *
torch.manual_seed(0)
for qs, ks, cs in (((2, 4, 3, 16), (2, 2, 5, 16), (1, 1, 16)), ((2, 4, 5, 16), (2, 2, 3, 16), (1, 1, 16)),
                   ((2, 4, 3, 16), (1, 2, 3, 16), (1, 3, 16))):
    q, k = torch.randn(qs), torch.randn(ks)
    ang = torch.randn(cs)
    cos, sin = ang.cos(), ang.sin()
    try:
        with guarded():
            t = mojo.rope(q, k, cos, sin, 16, False, 2, False, "ttx")
    except Exception as e:
        t = e
    r = mojo.rope(q, k, cos, sin, 16, False, 2, False, "torch")
    print(qs, ks, cs, "ttx:", t if isinstance(t, Exception) else [x.shape for x in t], "torch:", [x.shape for x in r])
    if not isinstance(t, Exception):
        print("   q equal", torch.allclose(t[0], r[0]), " k equal", torch.allclose(t[1], r[1], equal_nan=False),
              (t[1] - r[1]).abs().max())
