"""Probe harness: compiled (backend mojo, CPU) vs eager vs fp64 eager; loss + grads; input mutation."""
import conftest  # noqa
import torch, traceback
import mojo_compile
import torch._dynamo

def rel(a, b):
    a, b = a.double(), b.double()
    d = (a - b).norm(); n = b.norm()
    if torch.isnan(a).any() or torch.isnan(b).any():
        return float('nan') if not torch.equal(torch.isnan(a), torch.isnan(b)) else ((a.nan_to_num()-b.nan_to_num()).norm()/(b.nan_to_num().norm()+1e-30)).item()
    return (d / (n + 1e-30)).item()

def run(fn, args, wrt, grad=None):
    args = [a.detach().clone().requires_grad_() if i in wrt else a for i, a in enumerate(args)]
    out = fn(*args)
    loss = out[0] if isinstance(out, tuple) else out
    g = torch.ones_like(loss) if grad is None else grad.to(loss.dtype)
    if wrt:
        loss.backward(g)
    return loss.detach(), [args[i].grad for i in wrt]

def probe(name, fn, args, wrt=(0,), options=None, dynamic=None, grad=None):
    torch._dynamo.reset()
    mojo_compile.reset_report()
    opts = {"inner_compiler": "eager", "target": "torch"}
    opts.update(options or {})
    before = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    try:
        c = torch.compile(fn, backend="mojo", options=opts, dynamic=dynamic)
        got = run(c, args, wrt, grad)
        sites = [(s.pattern) for s in mojo_compile.last_report().sites]
    except Exception as e:
        print(f"[{name}] COMPILED CRASH: {type(e).__name__}: {str(e)[:300]}")
        try:
            run(fn, args, wrt, grad); print(f"[{name}]   eager runs fine")
        except Exception as e2:
            print(f"[{name}]   eager also raises {type(e2).__name__}: {str(e2)[:100]}")
        return
    for a, b in zip(args, before):
        if isinstance(a, torch.Tensor) and not torch.equal(a.nan_to_num(), b.nan_to_num()):
            print(f"[{name}] MUTATION of an input")
    eager = run(fn, args, wrt, grad)
    a64 = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
    ex = run(fn, a64, wrt, None if grad is None else grad.double())
    res = []
    for i, (m, e, x) in enumerate(zip([got[0], *got[1]], [eager[0], *eager[1]], [ex[0], *ex[1]])):
        if m is None or e is None:
            res.append(f"{i}:None m={m is None} e={e is None}"); continue
        if m.shape != e.shape or m.dtype != e.dtype:
            res.append(f"{i}:SHAPE/DTYPE {m.shape} {m.dtype} vs {e.shape} {e.dtype}")
            continue
        rm, re_ = rel(m, x), rel(e, x)
        flag = "  <<<<" if (rm != rm and re_ == re_) or rm > 2 * re_ + 5e-3 else ""
        res.append(f"{i}:{rm:.2e}/{re_:.2e}{flag}")
    print(f"[{name}] sites={sites} " + " ".join(res))
