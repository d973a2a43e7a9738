import conftest  # noqa
import torch, torch.nn.functional as F
import mojo_compile
H = 16
opts = {"inner_compiler": "eager", "target": "torch"}
def c(fn): torch._dynamo.reset(); return torch.compile(fn, backend="mojo", options=opts)

def plus_zero(x): return 1.0 / (x + 0)
x = torch.tensor([-0.0, 1.0, -2.0])
print("x+0 -> 1/.:", c(plus_zero)(x), "eager", plus_zero(x))

def norm(h, w):
    h32 = h.float(); return w * (h32 * torch.rsqrt(h32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(h.dtype)
def inplace_input(x, r, w):
    r += x
    return norm(r, w)
x = torch.randn(4, H); r = torch.randn(4, H); w = torch.randn(H)
r1, r2 = r.clone(), r.clone()
y1 = c(inplace_input)(x, r1, w); s = [s_.pattern for s_ in mojo_compile.last_report().sites]
y2 = inplace_input(x, r2, w)
print("inplace r+=x:", s, "out equal", torch.equal(y1, y2), "r equal", torch.equal(r1, r2))

def out_written(x, w):
    y = norm(x, w); y.add_(1); return y
print("out written:", torch.equal(c(out_written)(x, w), out_written(x, w)), [s_.pattern for s_ in mojo_compile.last_report().sites])

def gated_out_inplace(g, u):
    y = F.silu(g) * u; y.mul_(2); return y
print("gated out written:", torch.equal(c(gated_out_inplace)(x, r), gated_out_inplace(x, r)), [s_.pattern for s_ in mojo_compile.last_report().sites])

def gated_input_alias(gu):  # gate and up views of one buffer, then written
    g, u = gu[:, :H // 2], gu[:, H // 2:]
    y = F.silu(g) * u
    gu.zero_()
    return y
a, b = torch.randn(4, H), None
a1, a2 = a.clone(), a.clone()
print("gated views then zero_:", torch.equal(c(gated_input_alias)(a1), gated_input_alias(a2)), [s_.pattern for s_ in mojo_compile.last_report().sites])

def ln_noncontig_w(x, w, b): return F.layer_norm(x, (H,), w, b, 1e-5)
wb = torch.randn(2 * H)
print("ln strided weight:", torch.equal(c(ln_noncontig_w)(x, wb[::2], wb[1::2]), ln_noncontig_w(x, wb[::2], wb[1::2])), [s_.pattern for s_ in mojo_compile.last_report().sites])
print("rms strided weight:", torch.equal(c(norm)(x, wb[::2]), norm(x, wb[::2])), [s_.pattern for s_ in mojo_compile.last_report().sites])
def rms1d(x, w): return norm(x, w)
print("rms 1-D x:", torch.equal(c(rms1d)(x[0], w), rms1d(x[0], w)), [s_.pattern for s_ in mojo_compile.last_report().sites])
def f_rms_none(x): return F.rms_norm(x, (H,))
xb = torch.randn(4, H, dtype=torch.bfloat16)
print("F.rms_norm eps None bf16:", torch.equal(c(f_rms_none)(xb), f_rms_none(xb)), [s_.pattern for s_ in mojo_compile.last_report().sites])
