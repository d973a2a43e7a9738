from h import *
if sys.argv[1] == "fix":
    import fixsim_plugin2  # noqa
import torch.nn.functional as F
H = 32
def f(x, w, wg, wu):
    x32 = x.float()
    h = w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
    return F.silu(F.linear(h, wg)) * F.linear(h, wu)
torch.manual_seed(0)
x = torch.randn(2, 5, H, requires_grad=True); w = (1 + 0.1 * torch.randn(H)).requires_grad_()
wg, wu = [(0.2 * torch.randn(48, H)).requires_grad_() for _ in range(2)]
for be in ["inductor", "mojo"]:
    torch._dynamo.reset()
    c = torch.compile(f, backend=be, options={"cpp_wrapper": True}, dynamic=True)
    for n in (5, 7):
        xx = torch.randn(2, n, H, requires_grad=True)
        try:
            y = c(xx, w, wg, wu); print(be, n, "rg", y.requires_grad, "rel", rel(y, f(xx, w, wg, wu)))
            if y.requires_grad: y.sum().backward()
        except Exception as ex: print(be, n, "CRASH", type(ex).__name__, str(ex)[:200])
