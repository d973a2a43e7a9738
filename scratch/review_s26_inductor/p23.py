from h import *
import traceback
import torch.nn.functional as F
torch.manual_seed(0)
H = 32
def f(x, w, wg, wu, q, k, v):
    x32 = x.float()
    h = w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
    m = F.silu(F.linear(h, wg)) * F.linear(h, wu)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return m, o
def only_rms(x, w):
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
def only_sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
def only_gated(g, u):
    return F.silu(g) * u
x = torch.randn(2, 5, H, requires_grad=True); w = (1 + 0.1 * torch.randn(H)).requires_grad_()
wg, wu = [(0.2 * torch.randn(48, H)).requires_grad_() for _ in range(2)]
q, k, v = [torch.randn(1, 2, 6, 16, requires_grad=True) for _ in range(3)]
cases = {"f": (f, [x, w, wg, wu, q, k, v]), "rms": (only_rms, [x, w]), "sdpa": (only_sdpa, [q, k, v]), "gated": (only_gated, [x, x.detach().clone().requires_grad_()])}
for name in sys.argv[1].split(","):
    fn, args = cases[name]
    for be, opts in [("inductor", {"cpp_wrapper": True}), ("mojo", {"cpp_wrapper": True, "target": "torch"}), ("mojo", {"cpp_wrapper": True, "target": "torch", "disable": ["rms_norm", "gated_act", "attention"]})]:
        torch._dynamo.reset(); mojo_compile.reset_report()
        a = prep(args)
        try:
            out = torch.compile(fn, backend=be, options=opts)(*a)
            s = sum(o.sum() for o in flat(out)); s.backward(); print(name, be, opts, "ok", sites())
        except Exception as ex:
            print(name, be, opts, "CRASH", type(ex).__name__, str(ex)[:200]); traceback.print_exc(limit=-6)
