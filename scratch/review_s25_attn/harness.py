"""Probe harness: compile fn with backend=mojo (torch target, eager inner), compare to eager (fp64 and same dtype)."""
import sys, os
sys.path[:0] = ["/work/main/tests", "/work/main"]
import conftest  # noqa
import torch, torch.nn.functional as F
import mojo_compile


def probe(name, fn, *args, target="torch", inner="eager", dynamic=None, grad=False, tol=None):
    torch._dynamo.reset(); mojo_compile.reset_report()
    clones = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    try:
        cf = torch.compile(fn, backend="mojo", options={"target": target, "inner_compiler": inner}, dynamic=dynamic)
        got = cf(*args)
    except Exception as e:
        print(f"[{name}] CRASH {type(e).__name__}: {str(e)[:300]}"); return
    counts = mojo_compile.last_report().counts()
    ref = fn(*clones)
    d64 = [a.detach().double().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in clones]
    try:
        ref64 = fn(*d64)
    except Exception as e:
        ref64 = None
    mut = any(isinstance(a, torch.Tensor) and not torch.equal(a, c) for a, c in zip(args, clones) if isinstance(a, torch.Tensor) and not a.isnan().any())
    gots = got if isinstance(got, tuple) else (got,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    msg = []
    for i, (g, r) in enumerate(zip(gots, refs)):
        if g.dtype != r.dtype or g.shape != r.shape:
            msg.append(f"out{i} dtype/shape {g.dtype}{list(g.shape)} vs {r.dtype}{list(r.shape)}")
        e = (g.double() - r.double()).abs().nan_to_num(1e9).max().item() if g.shape == r.shape else -1
        nanm = (g.isnan() != r.isnan()).any().item() if g.shape == r.shape else None
        msg.append(f"out{i} maxabs_vs_eager={e:.3g} nan_mismatch={nanm}")
        if ref64 is not None:
            r64 = ref64 if not isinstance(ref64, tuple) else ref64[i]
            msg.append(f"vs64: got {(g.double()-r64).abs().nan_to_num(1e9).max().item():.3g} eager {(r.double()-r64).abs().nan_to_num(1e9).max().item():.3g}")
    print(f"[{name}] counts={counts} mutated={mut} " + "; ".join(msg))
    return got, ref
