from h import *
from c1 import rms
torch.manual_seed(0)
x = torch.randn(2, 7, 1); w = torch.randn(1) + 1
for dyn in [False]:
    torch._dynamo.reset()
    xc = x.clone().requires_grad_(); xe = x.clone().requires_grad_(); xd = x.double().requires_grad_()
    cf = torch.compile(rms, backend="mojo", dynamic=dyn, options={"target": "torch", "inner_compiler": "eager"})
    oc = cf(xc, w); oe = rms(xe, w); od = rms(xd, w.double())
    print(mojo_compile.last_report().counts())
    g = torch.randn_like(oe)
    gc, = torch.autograd.grad(oc, xc, g); ge, = torch.autograd.grad(oe, xe, g); gd, = torch.autograd.grad(od, xd, g.double())
    print(gc.flatten()[:6], ge.flatten()[:6], gd.flatten()[:6], sep="\n")
    print(err(gc, gd), err(ge, gd))
