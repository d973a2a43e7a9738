from h import *
from p12_legacy_mask import legacy, x, q, k, v  # noqa
gms = []
def be(gm, ex, **kw):
    gms.append(gm); return gm.forward
torch._dynamo.reset()
torch.compile(legacy, backend=be)(x, q, k, v)
print(len(gms)); print(gms[0].code[:3000])
