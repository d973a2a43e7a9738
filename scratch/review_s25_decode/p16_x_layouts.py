"""ttx GEMV / grouped / gated on x layouts whose rows do not merge into one stride (reshape copies)."""
from h import *
import torch.nn.functional as F

K = 40
xs = {
    "permuted 2x2": lambda: torch.randn(2, 2, K).permute(1, 0, 2),
    "expanded 2x2": lambda: torch.randn(1, 1, K).expand(2, 2, K),
    "every other row": lambda: torch.randn(8, K)[::2],
    "sliced batch of 3-D": lambda: torch.randn(3, 5, K)[:, 2:3],
    "overlapping rows": lambda: torch.randn(100).as_strided((3, K), (7, 1)),
}
fns = {
    "lin": lambda x, w: F.linear(x, w[:6]),
    "qkv": lambda x, w: (F.linear(x, w[:6]), F.linear(x, w[6:9]), F.linear(x, w[9:])),
    "gated": lambda x, w: F.silu(F.linear(x, w[:6])) * F.linear(x, w[6:12]),
}
for xn, mk in xs.items():
    for fn_name, fn in fns.items():
        for dt in [torch.float32, torch.bfloat16]:
            x = mk().to(dt) if dt == torch.float32 else mk().to(dt)
            w = (torch.randn(15, K) / 6).to(dt)
            with torch.no_grad():
                out, mut, s = run(fn, [x, w], "ttx")
            ok = all(c <= (2 * e + 1e-6 if dt == torch.float32 else 1.25 * e + 2 ** -20) and sd and ss for c, e, sd, ss in out)
            print("OK " if ok else "BAD", xn, fn_name, dt, [(f"{c:.1e}", f"{e:.1e}") for c, e, *_ in out], [o for o, _ in s])
