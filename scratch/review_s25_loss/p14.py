import conftest  # noqa
import torch, torch.nn.functional as F, mojo_compile
from h import rel
torch.manual_seed(0)
V, H = 37, 16
def lce(h, w, t, b=None): return F.cross_entropy((F.linear(h, w) if b is None else F.linear(h, w, b)).float().view(-1, V), t, label_smoothing=0.1)
def ce_rows(h, w, t): return F.cross_entropy(h.view(-1, H) @ w.t(), t)  # fp32 logits under autocast: bf16 matmul, no cast
def ce_noflt(h, w, t): return F.cross_entropy(F.linear(h, w).view(-1, V), t)
for name, fn in (("lce", lce), ("ce_rows", ce_rows), ("ce_nocast", ce_noflt)):
  for dt in (torch.float32, torch.bfloat16):
    for opts in ({"inner_compiler": "eager"}, {}):
        torch._dynamo.reset(); mojo_compile.reset_report()
        h = torch.randn(2, 5, H, dtype=dt); w = (torch.randn(V, H) * 0.3).to(dt); t = torch.randint(0, V, (10,))
        res = []
        for f in (torch.compile(fn, backend="mojo", options=opts), fn):
            hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()
            with torch.autocast("cpu", torch.bfloat16):
                l = f(hh, ww, t)
            l.backward(); res.append((l.detach(), hh.grad, ww.grad))
        hh, ww = h.double().requires_grad_(), w.double().requires_grad_()
        l = fn(hh, ww, t); l.backward(); ex = (l.detach(), hh.grad, ww.grad)
        errs = [(f"{rel(a, x):.1e}/{rel(b, x):.1e}", a.dtype == b.dtype) for a, b, x in zip(*res, ex)]
        print(name, dt, opts, [s.pattern for s in mojo_compile.last_report().sites], errs)
