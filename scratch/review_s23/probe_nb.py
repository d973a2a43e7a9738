import sys, torch, mojo_compile
OPT = {"inner_compiler": "eager", "target": "torch"}
kind = sys.argv[1]
lib = torch.library.Library("mojo", "DEF")
if kind == "lib_autograd":
    lib.define("revs23_sig3(Tensor x, str target=\"torch\") -> Tensor")
    class F(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            with torch._C._AutoDispatchBelowAutograd():
                return torch.ops.mojo.revs23_sig3(x)
        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            s = torch.sigmoid(x); return g * 3 * s * (1 - s)
    lib.impl("revs23_sig3", lambda x, target="torch": torch.sigmoid(x) * 3.0, "CPU")
    lib.impl("revs23_sig3", lambda x, target="torch": torch.empty_like(x), "Meta")
    lib.impl("revs23_sig3", lambda x, target="torch": F.apply(x), "Autograd")
    rep = lambda x: torch.ops.mojo.revs23_sig3(x)
elif kind == "lib_cia":
    lib.define("revs23_sig3(Tensor x, str target=\"torch\") -> Tensor")
    lib.impl("revs23_sig3", lambda x, target="torch": torch.sigmoid(x) * 3.0, "CompositeImplicitAutograd")
    rep = lambda x: torch.ops.mojo.revs23_sig3(x)
elif kind == "autograd_function":
    @torch.library.custom_op("mojo::revs23_sig3_inf", mutates_args=())
    def sig3_inf(x: torch.Tensor, target: str = "torch") -> torch.Tensor:
        return torch.sigmoid(x) * 3.0
    sig3_inf.register_fake(lambda x, target="torch": torch.empty_like(x))
    class F(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return sig3_inf(x)
        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            s = torch.sigmoid(x); return g * 3 * s * (1 - s)
    rep = lambda x: F.apply(x)
elif kind == "aten_only":
    rep = lambda x: 3.0 / (1.0 + torch.exp(-x))
elif kind == "custom_op_autograd_cpu_key":
    lib.define("revs23_sig3(Tensor x, str target=\"torch\") -> Tensor")
    lib.impl("revs23_sig3", lambda x, target="torch": torch.sigmoid(x) * 3.0, "CPU")
    lib.impl("revs23_sig3", lambda x, target="torch": torch.empty_like(x), "Meta")
    class F(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            with torch._C._AutoDispatchBelowAutograd():
                return torch.ops.mojo.revs23_sig3(x)
        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            s = torch.sigmoid(x); return g * 3 * s * (1 - s)
    lib.impl("revs23_sig3", lambda x, target="torch": F.apply(x), "AutogradCPU")
    rep = lambda x: torch.ops.mojo.revs23_sig3(x)
def search(x):
    return torch.sigmoid(x) * 3.0
if len(sys.argv) > 2:
    import mojo_compile.patterns as PP; PP._no_backward = lambda p, m: None
mojo_compile.register_pattern("user.sig3", search, rep, [(torch.randn(4, 8),)])
lin = torch.nn.Linear(8, 8)
x = torch.randn(3, 4, 8)
step = lambda x: search(lin(x)).sum()
out = torch.compile(step, backend="mojo", options=OPT)(x)
sites = [s.pattern for s in mojo_compile.last_report().sites]
rep_ = mojo_compile.last_report()
print("SITES", sites)
from mojo_compile import patterns as P; print("VERDICT", P._REFUSAL.get("verdict"))
out.backward(); g = lin.weight.grad.clone(); lin.zero_grad(); step(x).backward()
print("GRADOK", torch.allclose(g, lin.weight.grad, atol=1e-5))
