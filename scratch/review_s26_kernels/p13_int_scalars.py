from kh import *
torch.manual_seed(0)
x = torch.randn(3, 40, dtype=torch.bfloat16); w = torch.randn(40, dtype=torch.bfloat16)
for eps, off in ((0, 1), (1, 0), (1, 1), (2, 2)):
    for cast in ("normed", "output"):
        a = mojo.rms_norm(x, w, eps, off, cast, "ttx")[0]; b = mojo.rms_norm(x, w, eps, off, cast, "torch")[0]
        print("rms", eps, off, cast, (a.float() - b.float()).abs().max().item())
        a = mojo.add_rms_norm(x, x, w, eps, off, cast, "ttx")[0]; b = mojo.add_rms_norm(x, x, w, eps, off, cast, "torch")[0]
        print("addrms", eps, off, cast, (a.float() - b.float()).abs().max().item())
for eps in (0, 1):
    a = mojo.layer_norm(x, w, w, eps, "ttx")[0]; b = mojo.layer_norm(x, w, w, eps, "torch")[0]
    print("ln", eps, (a.float() - b.float()).abs().max().item())
q = torch.randn(1, 2, 5, 16); k = torch.randn(1, 2, 9, 16); v = torch.randn(1, 2, 9, 16)
for scale, softcap, window in ((1, 0, 0), (1, 1, 1), (2, 1, 2), (1, 0, 1)):
    for sq in (5, 1):
        qq = q[:, :, :sq]
        a = mojo.attention(qq, k, v, None, None, scale, True, window, softcap, None, "ttx")[0]
        b = mojo.attention(qq, k, v, None, None, scale, True, window, softcap, None, "torch")[0]
        print("attn", sq, scale, softcap, window, (a - b).abs().max().item())
l = torch.randn(4, 30); t = torch.randint(0, 30, (4,))
for ii in (1, 0, -1):
    for ls in (0, 1):
        a = mojo.cross_entropy(l, t, ii, "sum", ls, "ttx")[0]; b = mojo.cross_entropy(l, t, ii, "sum", ls, "torch")[0]
        print("ce", ii, ls, (a - b).abs().max().item())
h = torch.randn(4, 8); W = torch.randn(30, 8)
for sc, s, d in ((1, 1, 1), (0, 2, 1), (2, 1, 2)):
    a = mojo.linear_cross_entropy(h, W, t, 1, "mean", True, True, sc, s, d, 0, "ttx")
    b = mojo.linear_cross_entropy(h, W, t, 1, "mean", True, True, sc, s, d, 0, "torch")
    print("lce", sc, s, d, max((x - y).abs().max().item() for x, y in zip(a, b)))
