"""Kernel-review helpers: guarded allocations (sentinel-filled, with guard zones), rel error, layouts."""
import contextlib
import math
import os
import sys

sys.path[:0] = ["/work/main/tests", "/work/main"]
os.environ.setdefault("MOJO_CACHE_DIR", "/tmp/kernels_cache")
import conftest  # noqa: F401,E402  (TRITON_INTERPRET before mojo_compile)
import torch  # noqa: E402
import mojo_compile  # noqa: F401,E402

mojo = torch.ops.mojo
G = 1024  # guard elements on each side

_orig_empty, _orig_empty_like, _orig_new_empty = torch.empty, torch.empty_like, torch.Tensor.new_empty


def _sentinel(dtype):
    if dtype.is_floating_point:
        return float("nan")
    if dtype == torch.bool:
        return True
    return 77


def _guarded(shape, dtype, device):
    shape = tuple(int(s) for s in shape)
    n = math.prod(shape)
    buf = _orig_empty(n + 2 * G, dtype=dtype, device=device)
    buf.fill_(_sentinel(dtype))
    ALLOCS.append((buf, n))
    return buf[G:G + n].view(shape)


ALLOCS = []


def _empty(*size, dtype=None, device=None, **kw):
    shape = size[0] if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)) else size
    return _guarded(shape, dtype or torch.get_default_dtype(), device or "cpu")


def _empty_like(t, *, dtype=None, device=None, **kw):
    return _guarded(t.shape, dtype or t.dtype, device or t.device)


def _new_empty(self, *size, dtype=None, device=None, **kw):
    shape = size[0] if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)) else size
    return _guarded(shape, dtype or self.dtype, device or self.device)


@contextlib.contextmanager
def guarded():
    """torch.empty & co. return sentinel-filled views inside guard zones; on exit, raise if a guard was touched."""
    ALLOCS.clear()
    torch.empty, torch.empty_like, torch.Tensor.new_empty = _empty, _empty_like, _new_empty
    try:
        yield
    finally:
        torch.empty, torch.empty_like, torch.Tensor.new_empty = _orig_empty, _orig_empty_like, _orig_new_empty
    bad = []
    for buf, n in ALLOCS:
        s = _sentinel(buf.dtype)
        for zone in (buf[:G], buf[G + n:]):
            z = zone.float() if zone.dtype.is_floating_point else zone
            ok = torch.isnan(z).all() if buf.dtype.is_floating_point else (zone == s).all()
            if not ok:
                bad.append((tuple(buf.shape), buf.dtype, n))
    if bad:
        raise AssertionError(f"write outside an allocation: {bad}")


def rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    fin = torch.isfinite(b)
    if not torch.equal(torch.isnan(a), torch.isnan(b)):
        return float("inf")
    a, b = a[fin], b[fin]
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def boxed(t, kind="plain"):
    """A copy of t in a layout: plain, offset (storage offset), step (every other element along the last dim
    is NOT used; rows strided), tcont (transposed storage of the two leading dims), padded rows."""
    if kind == "plain":
        return t.clone()
    if kind == "offset":
        buf = torch.full((t.numel() + 37,), 7.0, dtype=t.dtype)
        v = buf[37:].view(t.shape)
        v.copy_(t)
        return v
    if kind == "padrows":  # each row padded: row stride > last dim
        big = torch.full((*t.shape[:-1], t.shape[-1] + 5), 7.0, dtype=t.dtype)
        v = big[..., 3:3 + t.shape[-1]]
        v.copy_(t)
        return v
    if kind == "lead_t" and t.dim() >= 3:  # leading two dims transposed in memory
        v = t.transpose(0, 1).contiguous().transpose(0, 1)
        return v
    return t.clone()


def check(name, got, ref64, eager, slack=2.0, tol=1e-6):
    """Flag when rel(got, fp64) > slack * rel(eager, fp64) + tol."""
    e_got, e_eager = rel(got, ref64), rel(eager, ref64)
    bad = not (e_got <= slack * e_eager + tol)
    if bad and ref64.detach().double().nan_to_num().norm() < 1e-3:  # exact ~0: judge the absolute error
        bad = (got.detach().double() - ref64.detach().double()).nan_to_num().norm() > 1e-4
    if bad and name.endswith("dsink") and e_got < 1e-2:  # a sum of a few rounded terms: noise
        bad = False
    if bad:
        print(f"  BAD {name}: ttx {e_got:.3g} torch {e_eager:.3g}", flush=True)
    return bad
