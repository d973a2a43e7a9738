"""Decode linears through the default Inductor inner compiler (torch target): qkv, gated, dynamic."""
from h import *
import torch.nn.functional as F

def block(x, wq, wk, wv, wg, wu, wd):
    q, k, v = F.linear(x, wq), F.linear(x, wk), F.linear(x, wv)
    h = x + F.linear(q * k.sum(-1, keepdim=True) + v, wd[:, :12].contiguous().t().contiguous()[:, :40].t().t() if False else wd[:40, :12])
    return F.linear(F.silu(F.linear(h, wg)) * F.linear(h, wu), wd)

for dt in [torch.float32, torch.bfloat16, torch.float16]:
    for dyn in [None, True]:
        for xs in [(1, 1, 40), (3, 40)]:
            args = [torch.randn(*xs).to(dt)] + [(torch.randn(*s) / 6).to(dt) for s in [(12, 40), (12, 40), (12, 40), (24, 40), (24, 40), (40, 24)]]
            try:
                with torch.no_grad():
                    out, mut, s = run(block, args, "torch", "inductor", dynamic=dyn)
                print(dt, dyn, xs, [(round(c / max(e, 1e-12), 3)) for c, e, *_ in out], all(mut), sorted(o for o, _ in s))
            except Exception as e:
                print(dt, dyn, xs, "CRASH", repr(e)[:300])
