"""bf16 SDPA with a causal+padding bool mask: gradient accuracy of mojo.attention (torch / ttx) vs eager vs fp64."""
from h import *
import torch.nn.functional as F
def f(q, k, v, m):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.35)
B, H, S, D = 2, 4, 11, 8
for t in ("torch", "ttx"):
    ratios = {"q": [], "k": [], "v": [], "out": []}
    for seed in range(6):
        torch.manual_seed(seed)
        q, k, v = (torch.randn(B, H, S, D) for _ in range(3))
        g = torch.randn(B, H, S, D)
        m = torch.ones(S, S, dtype=torch.bool).tril().expand(B, 1, S, S).clone(); m[1, :, :, :3] = False
        m[1, :, :3, 0] = True  # rows of the padding see one key
        res = {}
        for name, fn, dt in (("e", f, torch.bfloat16), ("d", f, torch.float64), ("c", None, torch.bfloat16)):
            qq, kk, vv = (x.to(dt).requires_grad_() for x in (q, k, v))
            if name == "c":
                torch._dynamo.reset(); fn = torch.compile(f, backend="mojo", options={"target": t, "inner_compiler": "eager"})
            o = fn(qq, kk, vv, m); o.backward(g.to(dt))
            res[name] = (o, qq.grad, kk.grad, vv.grad)
        for i, key in enumerate(("out", "q", "k", "v")):
            ce, ee = rel(res["c"][i], res["d"][i]), rel(res["e"][i], res["d"][i])
            ratios[key].append(round(ce / ee, 2))
    print(t, mojo_compile.last_report().counts(), ratios)
