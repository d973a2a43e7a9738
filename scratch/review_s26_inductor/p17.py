from h import *
torch.manual_seed(0)
H = 32
def rms(x, w, eps=1e-6):
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
def inplace_resid_input(x, r, w):
    r.add_(x)
    return rms(r, w), r
def inplace_resid_input_only_y(x, r, w):
    r.add_(x)
    return rms(r, w)
x = torch.randn(2, 5, H); r = torch.randn(2, 5, H); w = (1 + 0.1 * torch.randn(H))
xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
def run(fn, be, opts):
    torch._dynamo.reset(); mojo_compile.reset_report()
    xx, rr, ww = xg.detach().clone().requires_grad_(), r.clone(), wg.detach().clone().requires_grad_()
    f = fn if be is None else (torch.compile(fn, backend=be, options=opts) if opts else torch.compile(fn, backend=be))
    out = f(xx, rr, ww)
    outs = out if isinstance(out, tuple) else (out,)
    s = sum((o * torch.linspace(0.5, 1.5, o.numel()).view(o.shape)).sum() for o in outs)
    return torch.autograd.grad(s, [xx, ww])
for fn in [inplace_resid_input, inplace_resid_input_only_y]:
    ref = run(fn, None, None)
    for be, opts in [("aot_eager", None), ("inductor", None), ("mojo", {"target": "torch"}), ("mojo", {"target": "torch", "inner_compiler": "eager"})]:
        try:
            g = run(fn, be, opts)
            print(fn.__name__, be, opts, ["%.2e" % rel(a, b) for a, b in zip(g, ref)], sites() if be == "mojo" else "")
        except Exception as ex: print(fn.__name__, be, opts, "CRASH", type(ex).__name__, str(ex)[:200])
