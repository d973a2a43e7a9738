import itertools
import torch.nn.functional as F
from kh import *
torch.manual_seed(0)
bad = 0
for (m_shape, K, N), dt in itertools.product([((1,), 1, 5), ((2,), 3, 17), ((1, 3), 17, 33), ((4,), 1025, 40), ((1, 1), 8193, 9), ((2, 2), 100, 1)], [torch.bfloat16, torch.float16, torch.float32]):
    for xl, wl in (("plain", "plain"), ("padrows", "padrows"), ("bcast", "rowstep"), ("offset", "offset")):
        x = torch.randn(*m_shape, K, dtype=dt)
        if xl == "bcast":
            x = torch.randn(1, K, dtype=dt).expand(*m_shape, K) if len(m_shape) == 1 else torch.randn(1, 1, K, dtype=dt).expand(*m_shape, K)
        else:
            x = boxed(x, xl)
        ws = [torch.randn(N + i, K, dtype=dt) * 0.2 for i in range(3)]
        if wl == "rowstep":
            ws = [torch.randn(2 * (N + i), K, dtype=dt)[::2] * 0.2 for i in range(3)]
        else:
            ws = [boxed(w, wl) for w in ws]
        x64 = x.double(); w64 = [w.double() for w in ws]
        cases = {
            "linear": (lambda t: mojo.linear(x, ws[0], t), lambda: (x64 @ w64[0].t(),)),
            "linear2": (lambda t: mojo.linear2(x, ws[0], ws[1], t), lambda: tuple(x64 @ w.t() for w in w64[:2])),
            "linear3": (lambda t: mojo.linear3(x, *ws, t), lambda: tuple(x64 @ w.t() for w in w64)),
            "gated": (lambda t: mojo.gated_linear(x, ws[0], ws[0] * 0.5, "silu", t), lambda: (F.silu(x64 @ w64[0].t()) * (x64 @ (w64[0] * 0.5).t()),)),
        }
        for name, (f, ref) in cases.items():
            try:
                with guarded():
                    a = f("ttx")
            except Exception as e:
                print("ERR", name, m_shape, K, N, dt, xl, wl, type(e).__name__, str(e)[:150]); bad += 1; continue
            b = f("torch")
            a = a if isinstance(a, (tuple, list)) else (a,)
            b = b if isinstance(b, (tuple, list)) else (b,)
            for i, (aa, bb, rr) in enumerate(zip(a, b, ref())):
                if aa.shape != bb.shape or aa.dtype != bb.dtype:
                    print("SHAPE", name, aa.shape, bb.shape); bad += 1
                bad += check(f"{name}[{i}] {m_shape} K{K} N{N} {dt} {xl}/{wl}", aa, rr, bb, slack=2.0, tol=1e-5)
print("BAD", bad)
