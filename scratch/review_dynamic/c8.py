import sys
import torch
import torch.nn.functional as F
from h import safe, err
import mojo_compile
from c1 import rms
T = sys.argv[1]

def repeat_kv(h, n):
    b, kvh, s, d = h.shape
    if n == 1:
        return h
    h = h[:, :, None, :, :].expand(b, kvh, n, s, d)
    return h.reshape(b, kvh * n, s, d)

def gqa(q, k, v, am):
    n = q.shape[1] // k.shape[1]
    k, v = repeat_kv(k, n), repeat_kv(v, n)
    s = q.shape[2]
    i = torch.arange(s)
    mask = (i[None, :] <= i[:, None])[None, None] & am[:, None, None, :].bool()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

def gqa_native(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

def mk(s):
    B, Hq, Hk, S = s
    am = torch.ones(B, S, dtype=torch.long)
    if B > 1:
        am[1, S - S // 2:] = 0
    return [torch.randn(B, Hq, S, 8), torch.randn(B, Hk, S, 8), torch.randn(B, Hk, S, 8), am]

shapes = [(2, 4, 2, 7), (2, 4, 2, 9), (2, 6, 3, 9), (3, 4, 1, 5), (2, 8, 2, 11)]
safe("gqa-seq", gqa, mk, shapes, target=T, mode="auto")
safe("gqa-dyn", gqa, mk, shapes, target=T, mode="dyn")
safe("gqa_native-seq", gqa_native, lambda s: mk(s)[:3], shapes, target=T, mode="auto")
safe("gqa_native-dyn", gqa_native, lambda s: mk(s)[:3], shapes, target=T, mode="dyn")

# in-place residual add then norm: compare the mutated residual to eager's
def inplace(x, r, w):
    r += x
    return rms(r, w)

for dyn in (None, True):
    torch._dynamo.reset()
    cf = torch.compile(inplace, backend="mojo", dynamic=dyn, options={"target": T, "inner_compiler": "eager"})
    bad = []
    for s in [(2, 7, 16), (2, 9, 16), (3, 1, 16), (1, 33, 16)]:
        x, r, w = torch.randn(*s), torch.randn(*s), torch.randn(s[-1]) + 1
        rc, re_ = r.clone(), r.clone()
        oc = cf(x, rc, w); oe = inplace(x, re_, w)
        if not torch.equal(rc, re_) or err(oc, oe) > 1e-6:
            bad.append((s, err(rc, re_), err(oc, oe)))
    print("inplace", dyn, "BAD" if bad else "OK", bad, dict(mojo_compile.last_report().counts()))
