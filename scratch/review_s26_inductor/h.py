"""Probe helpers: backend mojo with the DEFAULT (Inductor) inner compiler vs eager vs fp64."""
import os, sys, time
sys.path[:0] = ["/work/main/tests", "/work/main"]
os.environ.setdefault("MOJO_CACHE_DIR", f"/tmp/inductor_cache_{os.getpid()}")
import conftest  # noqa: F401
import torch
import mojo_compile


def sites():
    return [s.pattern + ":" + s.target for s in mojo_compile.last_report().sites]


def rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def prep(args, dtype=None):
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            b = a.detach().clone()
            if dtype is not None and b.is_floating_point():
                b = b.to(dtype)
            b.requires_grad_(a.requires_grad)
            out.append(b)
        else:
            out.append(a)
    return out


def flat(o):
    if isinstance(o, torch.Tensor):
        return [o]
    if isinstance(o, (tuple, list)):
        return [t for x in o for t in flat(x)]
    return []


def check(name, fn, args, target="torch", grad=True, options=None, **kw):
    torch._dynamo.reset(); mojo_compile.reset_report()
    t0 = time.time()
    ea, ca, da = prep(args), prep(args), prep(args, torch.float64)
    orig = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args]
    opts = {"target": target, **(options or {})}
    err = None
    try:
        c = torch.compile(fn, backend="mojo", options=opts, **kw)(*ca)
    except Exception as e:
        err = f"{type(e).__name__}: {str(e)[:300]}"
    e = fn(*ea)
    d = fn(*da)
    if err:
        print(f"[{name}] CRASH {err}"); return
    bad = []
    for i, (x, y, z) in enumerate(zip(flat(c), flat(e), flat(d))):
        rc, re_ = rel(x, z), rel(y, z)
        if rc > 2 * re_ + 1e-6 or x.dtype != y.dtype or x.shape != y.shape:
            bad.append(f"out{i} rc={rc:.2e} re={re_:.2e} {x.dtype}/{y.dtype} {tuple(x.shape)}/{tuple(y.shape)}")
    # inputs unchanged relative to eager's copy
    for i, (a, b) in enumerate(zip(ca, ea)):
        if isinstance(a, torch.Tensor) and not torch.equal(a.detach(), b.detach()):
            bad.append(f"input{i} differs from eager's after call (max {(a.detach()-b.detach()).abs().max().item():.2e})")
    if grad and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
        def g(outs, ins):
            s = sum((o.double() * torch.linspace(0.5, 1.5, o.numel(), dtype=torch.float64).view(o.shape)).sum()
                    for o in flat(outs) if o.is_floating_point() and o.requires_grad)
            return torch.autograd.grad(s, [a for a in ins if isinstance(a, torch.Tensor) and a.requires_grad],
                                       allow_unused=True)
        try:
            gc = g(c, ca)
        except Exception as ex:
            bad.append(f"BACKWARD CRASH {type(ex).__name__}: {str(ex)[:300]}"); gc = None
        ge, gd = g(e, ea), g(d, da)
        if gc is not None:
            for i, (x, y, z) in enumerate(zip(gc, ge, gd)):
                if x is None or y is None:
                    if (x is None) != (y is None):
                        bad.append(f"grad{i} None mismatch")
                    continue
                rc, re_ = rel(x, z), rel(y, z)
                if rc > 2 * re_ + 1e-6:
                    bad.append(f"grad{i} rc={rc:.2e} re={re_:.2e}")
    print(f"[{name}] {'BAD ' + '; '.join(bad) if bad else 'ok'} sites={sites()} ({time.time()-t0:.0f}s)", flush=True)


def versus(name, fn, args, targets=("torch", "ttx"), grad=True, **kw):
    """check() for backend inductor (plain), then mojo on each target: a mojo failure matters where inductor's is fine."""
    import torch as _t
    saved = mojo_compile
    def plain(*a):
        return fn(*a)
    # plain inductor via check with a fake options path: compile directly
    _t._dynamo.reset()
    ca = prep(args); ea = prep(args)
    try:
        c = _t.compile(fn, backend="inductor", **kw)(*ca)
        e = fn(*ea)
        ok = all(rel(x, y) < 1e-4 for x, y in zip(flat(c), flat(e)))
        gi = ""
        if grad:
            s1 = sum(o.sum() for o in flat(c) if o.requires_grad); s2 = sum(o.sum() for o in flat(e) if o.requires_grad)
            g1 = _t.autograd.grad(s1, [a for a in ca if isinstance(a, _t.Tensor) and a.requires_grad])
            g2 = _t.autograd.grad(s2, [a for a in ea if isinstance(a, _t.Tensor) and a.requires_grad])
            gi = max(rel(a, b) for a, b in zip(g1, g2))
        print(f"[{name}] plain inductor: fwd close={ok} grad rel={gi}")
    except Exception as ex:
        print(f"[{name}] plain inductor CRASH {type(ex).__name__}: {str(ex).splitlines()[0][:200]}")
    for t in targets:
        check(f"{name} mojo/{t}", fn, args, t, grad=grad, **kw)
