"""`x + 0` is not an identity for x = -0.0 (-0.0 + 0 = +0.0): canonicalize's _identity_arith drops it."""
import conftest  # noqa
import torch
import mojo_compile  # noqa

def plus_zero(x): return 1.0 / (x + 0)
def plus_false(x): return torch.copysign(torch.ones_like(x), x + False)
x = torch.tensor([-0.0, 1.0, -2.0])
for fn in (plus_zero, plus_false):
    print(fn.__name__, "eager", fn(x).tolist())
    for name, kw in (("mojo/eager-inner", dict(backend="mojo", options={"inner_compiler": "eager"})),
                     ("mojo/inductor", dict(backend="mojo")), ("inductor", dict(backend="inductor")),
                     ("aot_eager", dict(backend="aot_eager"))):
        torch._dynamo.reset()
        print("  ", name, torch.compile(fn, **kw)(x).tolist())
