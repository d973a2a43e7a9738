from h import *
import torch.nn.functional as F
torch.manual_seed(0)
H = 32
class M(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.n = torch.nn.RMSNorm(H, eps=1e-6); s.g = torch.nn.Linear(H, 48, bias=False); s.u = torch.nn.Linear(H, 48, bias=False)
        s.d = torch.nn.Linear(48, H, bias=False); s.ln = torch.nn.LayerNorm(H)
        with torch.no_grad(): s.n.weight.add_(0.1 * torch.randn(H))
    def forward(s, x):
        h = s.n(x)
        return s.ln(x + s.d(F.silu(s.g(h)) * s.u(h)))
m = M(); x = torch.randn(2, 5, H)
md = __import__("copy").deepcopy(m).double()
for target in ["torch", "ttx"]:
    os.environ["MOJO_BACKEND"] = target
    for mode in ["reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]:
        for g in [True, False]:
            torch._dynamo.reset(); mojo_compile.reset_report()
            try:
                with torch.set_grad_enabled(g):
                    c = torch.compile(m, backend="mojo", mode=mode)
                    y = c(x); y2 = c(x); ye = m(x)
                yd = md(x.double())
                print(f"[{target} {mode} grad={g}] rel {rel(y, yd):.2e} eager {rel(ye, yd):.2e} second {rel(y2, yd):.2e} {sites()}", flush=True)
            except Exception as ex:
                print(f"[{target} {mode} grad={g}] CRASH {type(ex).__name__}: {str(ex)[:300]}")
    for opts in [{"freezing": True}, {"freezing": True, "max_autotune": True}]:
        torch._dynamo.reset(); mojo_compile.reset_report()
        try:
            with torch.no_grad():
                c = torch.compile(m, backend="mojo", options=opts); y = c(x); ye = m(x)
            print(f"[{target} {opts} no_grad] rel {rel(y, md(x.double())):.2e} eager {rel(ye, md(x.double())):.2e} {sites()}")
        except Exception as ex:
            print(f"[{target} {opts}] CRASH {type(ex).__name__}: {str(ex)[:300]}")
