"""Harness: compile fn with mojo under a dynamic mode, call with a sequence of shapes, compare to eager fp32 and
fp64 (outputs and grads), check inputs are not mutated, print report counts."""
import os
import sys
import traceback

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("MOJO_CACHE_DIR", "/tmp/review_dynamic_cache")
sys.path[:0] = ["tests", "."]
import conftest  # noqa: F401,E402
import torch  # noqa: E402
import mojo_compile  # noqa: E402

RESULTS = []


def err(a, b):
    a, b = a.detach().double(), b.detach().double()
    if a.shape != b.shape:
        return float("inf")
    fin = torch.isfinite(b)
    if not torch.equal(torch.isfinite(a), fin):
        return float("inf")
    d = (a - b)[fin]
    return (d.norm() / b[fin].norm().clamp_min(1e-30)).item() if d.numel() else 0.0


def _flat(o):
    if isinstance(o, torch.Tensor):
        return [o]
    if isinstance(o, (tuple, list)):
        return [t for x in o for t in _flat(x)]
    return []


def run_case(name, fn, make_inputs, shapes, target="torch", mode="auto", inner="eager", mark=None, grad=True,
             params=(), fullgraph=False):
    """make_inputs(shape) -> list of tensors (fp32). mode: "auto" | "dyn" (dynamic=True) | "mark" (mark_dynamic
    mark=[(input index, dim), ...]) | "static" (dynamic=False)."""
    torch._dynamo.reset()
    mojo_compile.reset_report()
    dyn = {"auto": None, "dyn": True, "mark": None, "static": False}[mode]
    cfn = torch.compile(fn, backend="mojo", dynamic=dyn, fullgraph=fullgraph,
                        options={"target": target, "inner_compiler": inner})
    ok = True
    msgs = []
    for shp in shapes:
        inputs = make_inputs(shp)
        diff_idx = [i for i, t in enumerate(inputs) if isinstance(t, torch.Tensor) and t.is_floating_point() and grad]
        ins_c = [t.clone().requires_grad_(i in diff_idx) if isinstance(t, torch.Tensor) else t for i, t in enumerate(inputs)]
        ins_e = [t.clone().requires_grad_(i in diff_idx) if isinstance(t, torch.Tensor) else t for i, t in enumerate(inputs)]
        ins_d = [(t.double() if t.is_floating_point() else t.clone()).requires_grad_(i in diff_idx)
                 if isinstance(t, torch.Tensor) else t for i, t in enumerate(inputs)]
        snap = [t.detach().clone() if isinstance(t, torch.Tensor) else None for t in ins_c]
        if mode == "mark" and mark:
            if mark in ("all", "all2"):
                nd = max(t.dim() for t in ins_c if isinstance(t, torch.Tensor))
                for t in ins_c:
                    if isinstance(t, torch.Tensor) and (t.dim() == nd or (mark == "all2" and t.dim() >= 2)):
                        for d in range(t.dim() - 1):
                            torch._dynamo.mark_dynamic(t, d)
            else:
                for i, d in mark:
                    torch._dynamo.mark_dynamic(ins_c[i], d)
        try:
            out_c = cfn(*ins_c)
        except Exception as e:  # noqa
            try:
                fn(*ins_e)
                eager_ok = "eager runs"
            except Exception as e2:  # noqa
                eager_ok = f"eager raises too: {type(e2).__name__}"
            msgs.append(f"  shape {shp}: COMPILED RAISED {type(e).__name__}: {str(e)[:300]} ({eager_ok})")
            ok = False
            continue
        out_e = fn(*ins_e)
        with torch.autocast("cpu", enabled=False):
            pd = [p.data.clone() for p in params]
            for p in params:
                p.data = p.data.double()
            try:
                out_d = fn(*ins_d)
            finally:
                for p, d in zip(params, pd):
                    p.data = d
        fc, fe, fd = _flat(out_c), _flat(out_e), _flat(out_d)
        for k, (c, e, d) in enumerate(zip(fc, fe, fd)):
            ec, ee = err(c, d), err(e, d)
            if not (ec <= 2 * ee + 1e-6):
                msgs.append(f"  shape {shp}: out{k} err vs fp64 {ec:.3g} (eager {ee:.3g}) shape {tuple(c.shape)}")
                ok = False
        if grad and diff_idx:
            gc_list, ge_list, gd_list = [], [], []
            floats = [k for k, c in enumerate(fc) if c.is_floating_point() and c.requires_grad]
            if floats:
                torch.manual_seed(123)
                cots = [torch.randn_like(fe[k]) for k in floats]
                try:
                    tgt_c = [ins_c[i] for i in diff_idx]
                    gc_list = torch.autograd.grad([fc[k] for k in floats], tgt_c, cots, allow_unused=True)
                except Exception as e:  # noqa
                    msgs.append(f"  shape {shp}: COMPILED BACKWARD RAISED {type(e).__name__}: {str(e)[:300]}")
                    ok = False
                    gc_list = None
                ge_list = torch.autograd.grad([fe[k] for k in floats], [ins_e[i] for i in diff_idx], cots,
                                              allow_unused=True)
                gd_list = torch.autograd.grad([fd[k] for k in floats], [ins_d[i] for i in diff_idx],
                                              [c.double() for c in cots], allow_unused=True)
                if gc_list is not None:
                    for i, gc, ge, gd in zip(diff_idx, gc_list, ge_list, gd_list):
                        if gd is None:
                            continue
                        if gc is None:
                            gc = torch.zeros_like(gd)
                        if ge is None:
                            ge = torch.zeros_like(gd)
                        ec, ee = err(gc, gd), err(ge, gd)
                        if not (ec <= 2 * ee + 1e-6):
                            msgs.append(f"  shape {shp}: grad[{i}] err {ec:.3g} (eager {ee:.3g})")
                            ok = False
        for i, (t, s) in enumerate(zip(ins_c, snap)):
            if s is not None and not torch.equal(t.detach(), s) and not (t.isnan().any() and s.isnan().any()):
                msgs.append(f"  shape {shp}: input {i} MUTATED")
                ok = False
    rep = mojo_compile.last_report()
    counts = dict(rep.counts())
    ngraphs = len(rep.graphs)
    notes = [n for g in rep.graphs for n in g.notes]
    status = "OK " if ok else "BAD"
    line = f"{status} {name} [{target}/{mode}/{inner}] graphs={ngraphs} fused={counts}"
    print(line, flush=True)
    for m in msgs:
        print(m, flush=True)
    if not ok or os.environ.get("VERBOSE"):
        for n in notes[:6]:
            print("    note:", n[:250])
    RESULTS.append((ok, line, msgs))
    return ok, rep


def safe(name, *a, **k):
    try:
        return run_case(name, *a, **k)
    except Exception:  # noqa
        print(f"ERR {name}: harness crashed")
        traceback.print_exc(limit=3)
        return False, None
