"""Probe harness: compiled (backend mojo, CPU) vs eager vs fp64 eager; output + grads; input mutation."""
import conftest  # noqa
import torch
import mojo_compile
import torch._dynamo


def rel(a, b):
    a, b = a.double(), b.double()
    if not torch.equal(torch.isnan(a), torch.isnan(b)):
        return float("nan")
    a, b = a.nan_to_num(), b.nan_to_num()
    return ((a - b).norm() / (b.norm() + 1e-30)).item()


def run(fn, args, wrt):
    args = [a.detach().clone().requires_grad_() if i in wrt else a for i, a in enumerate(args)]
    out = fn(*args)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if wrt:
        g = torch.Generator().manual_seed(123)
        loss = sum((o.double() * torch.randn(o.shape, generator=g, dtype=torch.float64)).sum() for o in outs
                   if o.is_floating_point())
        loss.backward()
    return [o.detach() for o in outs], [args[i].grad for i in wrt]


def probe(name, fn, args, wrt=(), options=None, dynamic=None):
    torch._dynamo.reset()
    mojo_compile.reset_report()
    opts = {"inner_compiler": "eager", "target": "torch"}
    opts.update(options or {})
    before = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    try:
        c = torch.compile(fn, backend="mojo", options=opts, dynamic=dynamic)
        got = run(c, [a.clone() if isinstance(a, torch.Tensor) else a for a in args], wrt)
        sites = [s.pattern for s in mojo_compile.last_report().sites]
    except Exception as e:
        print(f"[{name}] COMPILED CRASH: {type(e).__name__}: {str(e)[:400]}")
        try:
            run(fn, args, wrt)
            print(f"[{name}]   eager runs fine")
        except Exception as e2:
            print(f"[{name}]   eager also raises {type(e2).__name__}: {str(e2)[:100]}")
        return
    for a, b in zip(args, before):
        if isinstance(a, torch.Tensor) and not torch.equal(a.nan_to_num(), b.nan_to_num()):
            print(f"[{name}] MUTATION of an input")
    eager = run(fn, [a.clone() if isinstance(a, torch.Tensor) else a for a in args], wrt)
    a64 = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
    ex = run(fn, a64, wrt)
    res = []
    for i, (m, e, x) in enumerate(zip([*got[0], *got[1]], [*eager[0], *eager[1]], [*ex[0], *ex[1]])):
        if m is None or e is None:
            res.append(f"{i}:None m={m is None} e={e is None}" + ("  <<<<" if (m is None) != (e is None) else ""))
            continue
        if m.shape != e.shape or m.dtype != e.dtype:
            res.append(f"{i}:SHAPE/DTYPE {tuple(m.shape)} {m.dtype} vs {tuple(e.shape)} {e.dtype}  <<<<")
            continue
        if not m.is_floating_point():
            res.append(f"{i}:{'eq' if torch.equal(m, e) else 'NE <<<<'}")
            continue
        rm, re_ = rel(m, x), rel(e, x)
        flag = "  <<<<" if (rm != rm and re_ == re_) or rm > 2 * re_ + 1e-6 else ""
        res.append(f"{i}:{rm:.2e}/{re_:.2e}{flag}")
    print(f"[{name}] sites={sites} " + " ".join(res))
