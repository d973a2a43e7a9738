from kh import *
torch.manual_seed(0)
def cmp(name, f):
    with guarded():
        a = f("ttx")
    b = f("torch")
    a = a if isinstance(a, (tuple, list)) else (a,)
    b = b if isinstance(b, (tuple, list)) else (b,)
    print(name, [tuple(t.shape) for t in a] == [tuple(t.shape) for t in b],
          max(((x.double() - y.double()).abs().nan_to_num(1e9).max().item() if x.numel() else 0.0) for x, y in zip(a, b)))
x1 = torch.randn(40); w = torch.randn(40)
cmp("rms 1d", lambda t: mojo.rms_norm(x1, w, 1e-6, 0.0, "normed", t))
cmp("addrms 1d", lambda t: mojo.add_rms_norm(x1, x1, w, 1e-6, 0.0, "normed", t))
cmp("ln 1d", lambda t: mojo.layer_norm(x1, w, w, 1e-5, t))
cmp("addln 1d", lambda t: mojo.add_layer_norm(x1, x1, w, w, 1e-5, t))
cmp("gated 1d", lambda t: mojo.gated_act(x1, x1, "silu", t))
cmp("gated fused 1d", lambda t: mojo.gated_act_fused(x1, "gelu", False, t))
x5 = torch.randn(2, 1, 3, 1, 40)
cmp("rms 5d", lambda t: mojo.rms_norm(x5, w, 1e-6, 0.0, "output", t))
xt = torch.randn(40, 6).t()
cmp("rms transposed", lambda t: mojo.rms_norm(xt, w, 1e-6, 0.0, "output", t))
cmp("ln transposed", lambda t: mojo.layer_norm(xt, w, None, 1e-5, t))
cmp("ln bias only", lambda t: mojo.layer_norm(xt, None, w, 1e-5, t))
xx = torch.randn(6, 40, requires_grad=True)
for tgt in ("ttx", "torch"):
    y = mojo.layer_norm(xx, None, w.clone().requires_grad_(), 1e-5, tgt)[0]
    print("ln bias-only grad", tgt, torch.autograd.grad(y, xx, torch.randn_like(y) * 0 + 1)[0].abs().max().item())
x0 = torch.randn(3, 0)
cmp("rms N=0", lambda t: mojo.rms_norm(x0, torch.randn(0), 1e-6, 0.0, "output", t)[0])
cmp("ln N=0", lambda t: mojo.layer_norm(x0, None, None, 1e-5, t)[0])
cmp("gated N=0", lambda t: mojo.gated_act(x0, x0, "silu", t))
