from h import *
torch.manual_seed(0)
H = 32
def rms(x, w, eps=1e-6):
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
def inplace_resid_input(x, r, w):
    r.add_(x)
    return rms(r, w), r
x = torch.randn(2, 5, H); r = torch.randn(2, 5, H); w = (1 + 0.1 * torch.randn(H))
def grads(outs, ins, wdt):
    s = sum((o.to(wdt) * torch.linspace(0.5, 1.5, o.numel(), dtype=wdt).view(o.shape)).sum() for o in outs)
    return torch.autograd.grad(s, ins)
for be, opts in [(None, None), ("aot_eager", None), ("inductor", None), ("mojo", {"target": "torch"}), ("mojo", {"target": "torch", "inner_compiler": "eager"})]:
    for wdt in [torch.float32, torch.float64]:
        torch._dynamo.reset()
        xx, rr, ww = x.clone().requires_grad_(), r.clone(), w.clone().requires_grad_()
        f = inplace_resid_input if be is None else (torch.compile(inplace_resid_input, backend=be, options=opts) if opts else torch.compile(inplace_resid_input, backend=be))
        out = f(xx, rr, ww)
        g = grads(out, [xx, rr, ww], wdt)
        if be is None and wdt == torch.float32: ref = g
        print(be, opts, wdt, ["%.2e" % rel(a, b) for a, b in zip(g, ref)])
