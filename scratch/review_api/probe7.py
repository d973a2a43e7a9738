import conftest  # noqa
import sys
import torch, torch.nn.functional as F
import mojo_compile
OPT = {"inner_compiler": "eager", "target": "torch"}
case = sys.argv[1]
torch.manual_seed(0)
if case == "A":
    def search(x):
        return torch.sigmoid(x) * 3.0
    def rep(x):
        y = torch.sigmoid(x) * 3.0
        return torch.cat([y.flatten()[:-1], -y.flatten()[-1:]]).view(y.shape)  # last element sign-flipped
    mojo_compile.register_pattern("user.sig3", search, rep, [(torch.randn(4, 8),)])
    x = torch.randn(4, 128, 256, dtype=torch.bfloat16)
    fn = lambda x: torch.sigmoid(x) * 3.0
    v = mojo_compile.verify(fn, x, options=OPT)
    out = torch.compile(fn, backend="mojo", options=OPT)(x)
    print(v.table()); print("max abs diff:", (out.float() - fn(x).float()).abs().max().item())
if case == "B":
    aten = torch.ops.aten
    def bad_pass(gm):
        for n in gm.graph.nodes:
            if n.op == "call_function" and n.target == aten.sigmoid.default:
                n.target = aten.tanh.default
        return []
    mojo_compile.register_graph_pass("user.badpass", bad_pass)
    x = torch.randn(3, 16)
    fn = lambda x: torch.sigmoid(x) + 1
    for r in mojo_compile.bisect(fn, x, options=OPT):
        print(r.text())
if case == "C":
    def s1(x):
        return torch.sigmoid(x) * 3.0
    mojo_compile.register_pattern("user", s1, lambda x: torch.sigmoid(x) * 3.0, [(torch.randn(4, 8),)], family="user")
    def s2(x):
        return torch.tanh(x) * 5.0
    mojo_compile.register_pattern("user.tanh5", s2, lambda x: torch.tanh(x) * 5.0 + 1, [(torch.randn(4, 8),)], family="user", priority=5)
    x = torch.randn(3, 16)
    fn = lambda x: torch.sigmoid(x) * 3.0 + torch.tanh(x) * 5.0
    for r in mojo_compile.bisect(fn, x, options=OPT):
        print(r.text())
if case == "D":
    import sys as _s; _s.path.insert(0, "examples"); import relu_squared_fusion  # noqa
    def fn(x):
        y = F.relu(x) ** 2
        y.add_(1)
        return y
    x = torch.randn(4, 16, 32)
    v = mojo_compile.verify(fn, x, options=OPT); print(v.table())
