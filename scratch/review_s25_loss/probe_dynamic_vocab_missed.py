"""Missed fusion: dynamic=True with the view spelled from the shape (`view(-1, logits.shape[-1])`): the LM head and
the loss are not fused (the materialised rows form takes the loss); with the literal V they are."""
import conftest  # noqa
import torch, torch.nn.functional as F
import mojo_compile

V, H = 37, 16


def shape_spelled(h, w, t):
    z = F.linear(h, w).float()
    return F.cross_entropy(z.view(-1, z.shape[-1]), t)


def literal(h, w, t):
    return F.cross_entropy(F.linear(h, w).float().view(-1, V), t)


for fn in (shape_spelled, literal):
    for dynamic in (None, True):
        torch._dynamo.reset()
        mojo_compile.reset_report()
        h = torch.randn(2, 5, H, dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(V, H, dtype=torch.bfloat16, requires_grad=True)
        torch.compile(fn, backend="mojo", options={"inner_compiler": "eager"}, dynamic=dynamic)(
            h, w, torch.randint(0, V, (10,))).backward()
        rep = mojo_compile.last_report()
        print(fn.__name__, dynamic, [s.pattern for s in rep.sites])
        for g in rep.graphs:
            for nm in getattr(g, "near_misses", [])[:6]:
                print("   near miss:", str(nm)[:250])
