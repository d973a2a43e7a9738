"""Probe helpers: compile with backend mojo on CPU, compare with eager and an fp64 reference."""
import os, sys
sys.path[:0] = ["/work/main/tests", "/work/main"]
os.environ.setdefault("MOJO_CACHE_DIR", "/tmp/rev25d_cache")
import conftest  # noqa: F401  (TRITON_INTERPRET before mojo_compile)
import torch
import mojo_compile


def comp(fn, target="torch", inner="eager", **kw):
    return torch.compile(fn, backend="mojo", options={"target": target, "inner_compiler": inner}, **kw)


def sites():
    return [(s.op, s.detail) for s in mojo_compile.last_report().sites]


def rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def clones(args):
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def run(fn, args, target="torch", inner="eager", **kw):
    torch._dynamo.reset(); mojo_compile.reset_report()
    ea, ca = clones(args), clones(args)
    e = fn(*ea)
    c = comp(fn, target, inner, **kw)(*ca)
    d = fn(*[a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in clones(args)])
    es = e if isinstance(e, (tuple, list)) else (e,)
    cs = c if isinstance(c, (tuple, list)) else (c,)
    ds = d if isinstance(d, (tuple, list)) else (d,)
    out = []
    for x, y, z in zip(cs, es, ds):
        out.append((rel(x, z), rel(y, z), x.dtype == y.dtype, x.shape == y.shape))
    mut = [torch.equal(a, b) if isinstance(a, torch.Tensor) else True for a, b in zip(ca, ea)]
    return out, mut, sites()
