import itertools, sys
from kh import *

torch.manual_seed(0)
bad = 0
DT = [torch.bfloat16, torch.float16, torch.float32]


def rms64(x, w, eps, off, r=None):
    x = x.double() if r is None else (x + r).double()
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * (w.double() + off) if w is not None else y


def run_rms(shape, dt, wdt, cast, layout, eps, off, res):
    global bad
    x0 = torch.randn(*shape, dtype=dt) * 2 + 0.3
    w0 = (1 + 0.5 * torch.randn(shape[-1])).to(wdt) if wdt is not None else None
    r0 = torch.randn(*shape, dtype=dt) if res else None
    outs = {}
    for tgt in ("ttx", "torch"):
        x = boxed(x0, layout).requires_grad_()
        w = w0.clone().requires_grad_() if w0 is not None else None
        r = boxed(r0, layout).requires_grad_() if res else None
        snap = [t.detach().clone() for t in (x, w, r) if t is not None]
        with guarded() if tgt == "ttx" else contextlib.nullcontext():
            if res:
                y, s, _ = mojo.add_rms_norm(x, r, w, eps, off, cast, tgt)
                gy, gs = torch.ones_like(y) * 0.7 + torch.arange(y.numel()).view(y.shape).to(y.dtype) % 3, torch.ones_like(s) * 0.1
                grads = torch.autograd.grad((y, s), [t for t in (x, w, r) if t is not None], (gy, gs))
            else:
                y, _ = mojo.rms_norm(x, w, eps, off, cast, tgt)
                gy = torch.ones_like(y) * 0.7 + torch.arange(y.numel()).view(y.shape).to(y.dtype) % 3
                grads = torch.autograd.grad(y, [t for t in (x, w) if t is not None], gy)
        for a, b in zip(snap, [t for t in (x, w, r) if t is not None]):
            if not torch.equal(a, b.detach()):
                print("  MUTATED", shape, dt, layout); bad += 1
        outs[tgt] = (y, grads)
    # fp64
    leaves = [t.detach().double().requires_grad_() for t in (x0, w0, r0) if t is not None]
    x64 = leaves[0]; w64 = leaves[1] if w0 is not None else None; r64 = leaves[-1] if res else None
    y64 = rms64(x64, w64, eps, off, r64)
    if res:
        g64 = torch.autograd.grad((y64, x64 + r64), leaves, (gy.double(), gs.double()))
    else:
        g64 = torch.autograd.grad(y64, leaves, gy.double())
    tag = f"rms {shape} {dt} w={wdt} {cast} {layout} eps={eps} off={off} res={res}"
    b = check(tag + " y", outs["ttx"][0], y64, outs["torch"][0])
    for i, (gt, ge, g6) in enumerate(zip(outs["ttx"][1], outs["torch"][1], g64)):
        b |= check(tag + f" grad{i}", gt, g6, ge, tol=1e-5)
    bad += b


def ln64(x, w, b, eps, r=None):
    x = x.double() if r is None else (x + r).double()
    m = x.mean(-1, keepdim=True)
    y = (x - m) / torch.sqrt((x - m).pow(2).mean(-1, keepdim=True) + eps)
    y = y * w.double() if w is not None else y
    return y + b.double() if b is not None else y


def run_ln(shape, dt, affine, layout, eps, res):
    global bad
    x0 = torch.randn(*shape, dtype=dt) * 2 + 1.5
    w0 = (1 + 0.5 * torch.randn(shape[-1])).to(dt) if affine else None
    b0 = torch.randn(shape[-1]).to(dt) if affine else None
    r0 = torch.randn(*shape, dtype=dt) if res else None
    outs = {}
    gy = None
    for tgt in ("ttx", "torch"):
        x = boxed(x0, layout).requires_grad_()
        w = w0.clone().requires_grad_() if affine else None
        bb = b0.clone().requires_grad_() if affine else None
        r = boxed(r0, layout).requires_grad_() if res else None
        leaves = [t for t in (x, w, bb, r) if t is not None]
        with guarded() if tgt == "ttx" else contextlib.nullcontext():
            if res:
                y, s, _, _ = mojo.add_layer_norm(x, r, w, bb, eps, tgt)
                gy = torch.randn_like(y) if gy is None else gy
                grads = torch.autograd.grad((y, s), leaves, (gy, gy * 0.5))
            else:
                y, _, _ = mojo.layer_norm(x, w, bb, eps, tgt)
                gy = torch.randn_like(y) if gy is None else gy
                grads = torch.autograd.grad(y, leaves, gy)
        outs[tgt] = (y, grads)
    leaves = [t.detach().double().requires_grad_() for t in (x0, w0, b0, r0) if t is not None]
    x64 = leaves[0]
    w64, b64 = (leaves[1], leaves[2]) if affine else (None, None)
    r64 = leaves[-1] if res else None
    y64 = ln64(x64, w64, b64, eps, r64)
    g64 = torch.autograd.grad((y64, x64 + r64) if res else y64, leaves,
                              (gy.double(), gy.double() * 0.5) if res else gy.double())
    tag = f"ln {shape} {dt} aff={affine} {layout} eps={eps} res={res}"
    b = check(tag + " y", outs["ttx"][0], y64, outs["torch"][0])
    for i, (gt, ge, g6) in enumerate(zip(outs["ttx"][1], outs["torch"][1], g64)):
        b |= check(tag + f" grad{i}", gt, g6, ge, tol=1e-5)
    bad += b


which = sys.argv[1] if len(sys.argv) > 1 else "all"
SH = [(1, 1), (3, 3), (5, 17), (1, 100), (7, 5000), (2, 8193), (2, 3, 100)]
if which in ("rms", "all"):
    for shape, dt in itertools.product(SH, DT):
        for cast in ("normed", "output", "rstd"):
            run_rms(shape, dt, dt if cast != "rstd" else None, cast, "plain", 1e-6, 0.0, False)
        run_rms(shape, dt, torch.float32, "normed", "padrows", 1e-5, 0.0, True)
        run_rms(shape, dt, dt, "output", "offset", 1e-5, 1.0, True)
    for eps in (0.0, 1e-30, 10.0):
        run_rms((3, 17), torch.float32, torch.float32, "normed", "plain", eps, 0.0, False)
        run_rms((3, 17), torch.bfloat16, torch.bfloat16, "normed", "plain", eps, 0.0, True)
    run_rms((2, 16385), torch.bfloat16, torch.bfloat16, "normed", "plain", 1e-6, 0.0, True)
    run_rms((2, 3, 5, 64), torch.bfloat16, torch.float32, "output", "lead_t", 1e-6, 0.5, True)
    print("rms done", bad, flush=True)
if which in ("ln", "all"):
    for shape, dt in itertools.product(SH, DT):
        run_ln(shape, dt, True, "plain", 1e-5, False)
        run_ln(shape, dt, False, "padrows", 1e-5, True)
        run_ln(shape, dt, True, "offset", 1e-5, True)
    for eps in (0.0, 1e-30, 10.0):
        run_ln((3, 17), torch.float32, True, "plain", eps, False)
    run_ln((2, 3, 5, 64), torch.bfloat16, True, "lead_t", 1e-6, True)
    print("ln done", bad, flush=True)
print("TOTAL BAD", bad)
