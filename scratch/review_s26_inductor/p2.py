from h import *
torch.manual_seed(0)
H = 32
def rms(x, w, eps=1e-6):
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
def f(x, r, w):
    r = r + x
    y = rms(r, w)
    r += y
    return r
x = torch.randn(2, 5, H, requires_grad=True); r = torch.randn(2, 5, H); w = (1 + 0.1 * torch.randn(H)).requires_grad_()
e = f(x, r, w)
try:
    e.sum().backward(); print("eager backward ok")
except Exception as ex: print("eager backward fails:", str(ex)[:100])
for be, opts in [("inductor", None), ("aot_eager", None), ("mojo", {"inner_compiler": "eager", "target": "torch"}), ("mojo", {"target": "torch"})]:
    torch._dynamo.reset()
    try:
        c = torch.compile(f, backend=be, options=opts) if opts else torch.compile(f, backend=be)
        out = c(x, r, w); print(be, opts, "fwd ok", (out - e).abs().max().item())
        out.sum().backward(); print("  bwd ok")
    except Exception as ex: print(be, opts, "fails:", type(ex).__name__, str(ex).splitlines()[0][:150], str(ex).splitlines()[1][:150] if len(str(ex).splitlines())>1 else "")
