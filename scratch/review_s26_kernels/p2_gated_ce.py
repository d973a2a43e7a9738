import itertools, sys
import torch.nn.functional as F
from kh import *

torch.manual_seed(0)
bad = 0
DT = [torch.bfloat16, torch.float16, torch.float32]


def act64(g, act):
    if act == "silu":
        return F.silu(g)
    return F.gelu(g, approximate="tanh" if act == "gelu_tanh" else "none")


def make_gate_up(shape, dt, layout):
    if layout == "halves":
        gu = torch.randn(*shape[:-1], 2 * shape[-1], dtype=dt) * 2
        return gu[..., :shape[-1]], gu[..., shape[-1]:]
    if layout == "bcast":  # gate broadcast over the leading dim (stride 0)
        g = (torch.randn(1, *shape[1:], dtype=dt) * 2).expand(shape)
        return g, torch.randn(*shape, dtype=dt)
    g, u = torch.randn(*shape, dtype=dt) * 2, torch.randn(*shape, dtype=dt)
    return boxed(g, layout), boxed(u, layout)


def run_gated(shape, dt, act, layout):
    global bad
    g0, u0 = make_gate_up(shape, dt, layout)
    outs = {}
    gy = torch.randn(*shape, dtype=dt)
    for tgt in ("ttx", "torch"):
        g, u = g0.detach().clone() if layout == "bcast" else g0, u0
        g = g0.detach().requires_grad_() if layout != "bcast" else g0.detach().requires_grad_()
        u = u0.detach().requires_grad_()
        snap = (g.detach().clone(), u.detach().clone())
        with guarded() if tgt == "ttx" else contextlib.nullcontext():
            y = mojo.gated_act(g, u, act, tgt)
            grads = torch.autograd.grad(y, (g, u), gy)
        if not (torch.equal(snap[0], g.detach()) and torch.equal(snap[1], u.detach())):
            print("  MUTATED", shape, layout); bad += 1
        outs[tgt] = (y, grads)
    g64, u64 = (t.detach().double().requires_grad_() for t in (g0, u0))
    y64 = act64(g64, act) * u64
    gr64 = torch.autograd.grad(y64, (g64, u64), gy.double())
    tag = f"gated {shape} {dt} {act} {layout}"
    b = check(tag + " y", outs["ttx"][0], y64, outs["torch"][0])
    for i in range(2):
        b |= check(tag + f" grad{i}", outs["ttx"][1][i], gr64[i], outs["torch"][1][i])
    bad += b


def run_fused(shape, dt, act, gate_first, layout):
    global bad
    gu0 = torch.randn(*shape[:-1], 2 * shape[-1], dtype=dt) * 2
    gu0 = boxed(gu0, layout)
    gy = torch.randn(*shape, dtype=dt)
    outs = {}
    for tgt in ("ttx", "torch"):
        gu = gu0.detach().requires_grad_()
        with guarded() if tgt == "ttx" else contextlib.nullcontext():
            y = mojo.gated_act_fused(gu, act, gate_first, tgt)
            (gr,) = torch.autograd.grad(y, gu, gy)
        outs[tgt] = (y, gr)
    gu64 = gu0.detach().double().requires_grad_()
    a, b_ = gu64.chunk(2, -1)
    g64, u64 = (a, b_) if gate_first else (b_, a)
    y64 = act64(g64, act) * u64
    (gr64,) = torch.autograd.grad(y64, gu64, gy.double())
    tag = f"fused {shape} {dt} {act} gf={gate_first} {layout}"
    b = check(tag + " y", outs["ttx"][0], y64, outs["torch"][0])
    b |= check(tag + " grad", outs["ttx"][1], gr64, outs["torch"][1])
    bad += b


def run_ce(n, v, dt, layout, ignore, reduction, ls, all_ignored=False):
    global bad
    x0 = torch.randn(n, v, dtype=dt) * 3
    if layout == "padrows":
        x0 = boxed(x0, "padrows")
    elif layout == "transposed":
        x0 = x0.t().contiguous().t()
    elif layout == "bcast":
        x0 = (torch.randn(1, v, dtype=dt) * 3).expand(n, v)
    labels = torch.randint(0, v, (n,))
    if ignore is not None:
        labels[::3] = ignore
    if all_ignored:
        labels[:] = ignore if ignore is not None else -100
    ii = ignore if ignore is not None else -100
    outs = {}
    for tgt in ("ttx", "torch"):
        x = x0.detach().requires_grad_()
        snap = x.detach().clone()
        with guarded() if tgt == "ttx" else contextlib.nullcontext():
            loss, lse = mojo.cross_entropy(x, labels, ii, reduction, ls, tgt)
            gl = torch.ones_like(loss) if reduction != "none" else torch.linspace(0.5, 1.5, n)
            (gx,) = torch.autograd.grad(loss, x, gl)
        if not torch.equal(snap, x.detach()):
            print("  MUTATED ce"); bad += 1
        outs[tgt] = (loss, gx)
    x64 = x0.detach().double().requires_grad_()
    l64 = F.cross_entropy(x64, labels, ignore_index=ii, reduction=reduction, label_smoothing=ls)
    (g64,) = torch.autograd.grad(l64, x64, gl.double())
    tag = f"ce {n}x{v} {dt} {layout} ig={ignore} {reduction} ls={ls} allign={all_ignored}"
    b = check(tag + " loss", outs["ttx"][0], l64, outs["torch"][0])
    b |= check(tag + " grad", outs["ttx"][1], g64, outs["torch"][1], tol=1e-5)
    bad += b


which = sys.argv[1] if len(sys.argv) > 1 else "all"
if which in ("gated", "all"):
    for shape, dt, act in itertools.product([(1, 1), (3, 3), (5, 17), (2, 3, 100), (2, 5000)], DT,
                                            ("silu", "gelu_tanh", "gelu")):
        for layout in ("plain", "halves", "padrows", "offset", "lead_t", "bcast"):
            if layout == "lead_t" and len(shape) < 3:
                continue
            run_gated(shape, dt, act, layout)
        for gf in (True, False):
            run_fused(shape, dt, act, gf, "padrows" if gf else "offset")
    print("gated done", bad, flush=True)
if which in ("ce", "all"):
    for (n, v), dt in itertools.product([(1, 1), (3, 3), (5, 17), (7, 100), (3, 20001)], DT):
        for layout in ("plain", "padrows", "transposed", "bcast"):
            run_ce(n, v, dt, layout, None, "mean", 0.0)
        run_ce(n, v, dt, "plain", -1, "sum", 0.1)
        run_ce(n, v, dt, "plain", 0, "none", 0.0)
        run_ce(n, v, dt, "plain", None, "mean", 0.0, all_ignored=True)
        run_ce(n, v, dt, "plain", None, "sum", 0.3, all_ignored=True)
    print("ce done", bad, flush=True)
print("TOTAL BAD", bad)
