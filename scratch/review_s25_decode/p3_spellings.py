"""Which decode-linear spellings fuse (missed fusions), and whether the numbers stay eager's."""
from h import *
import torch.nn.functional as F

lin = torch.nn.Linear(16, 12, bias=False)
cases = {
    "bias None": lambda x, w: F.linear(x, w, None),
    "x.matmul(w.T)": lambda x, w: x.matmul(w.T),
    "w.mT": lambda x, w: x @ w.mT,
    "t().contiguous()": lambda x, w: x @ w.t().contiguous(),
    "einsum": lambda x, w: torch.einsum("bk,nk->bn", x, w),
    "(w @ x.T).T": lambda x, w: (w @ x.T).T,
    "nn.Linear": lambda x, w: F.linear(x, lin.weight.to(x.dtype)) if x.dtype == torch.float64 else lin(x),
}
for name, fn in cases.items():
    x, w = torch.randn(2, 16), torch.randn(12, 16)
    with torch.no_grad():
        out, mut, s = run(fn, [x, w])
    print(f"{name:20s}", out, [o for o, _ in s])
for mode in ["no_grad", "inference_mode"]:
    ctx = torch.no_grad if mode == "no_grad" else torch.inference_mode
    with ctx():
        out, mut, s = run(lambda x, w: F.linear(x, lin.weight.to(x.dtype)) if x.dtype == torch.float64 else lin(x), [torch.randn(2, 16), torch.randn(12, 16)])
    print(mode, out, s)
