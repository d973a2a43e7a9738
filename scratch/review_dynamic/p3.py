from h import *
from c2 import sdpa_additive, mk_qkv_am
import sys
T = sys.argv[1]; dyn = {"auto": None, "dyn": True, "static": False}[sys.argv[2]]
torch.manual_seed(0)
q, k, v, am = mk_qkv_am((2, 6))
if len(sys.argv) > 3: am[:] = 1
cf = torch.compile(sdpa_additive, backend="mojo", dynamic=dyn, options={"target": T, "inner_compiler": "eager"})
qc, kc, vc = (t.clone().requires_grad_() for t in (q, k, v))
qe, ke, ve = (t.clone().requires_grad_() for t in (q, k, v))
oc = cf(qc, kc, vc, am); oe = sdpa_additive(qe, ke, ve, am)
rep = mojo_compile.last_report()
for s in rep.sites: print(s)
print("out err", err(oc, oe))
g = torch.randn_like(oe)
gc = torch.autograd.grad(oc, (qc, kc, vc), g); ge = torch.autograd.grad(oe, (qe, ke, ve), g)
for a, b in zip(gc, ge):
    print("grad err", err(a, b), "per batch/row diff:", (a - b).abs().amax(dim=(1, 3)))
print(rep.graphs[0].graph[:3000])
