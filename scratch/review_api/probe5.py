import conftest  # noqa
import torch
import mojo_compile
from mojo_compile import lowering
OPT = {"inner_compiler": "eager", "target": "torch"}

@torch.library.custom_op("mojo::review_sig3", mutates_args=())
def review_sig3(x: torch.Tensor, target: str = "torch") -> torch.Tensor:
    return lowering.call("review_sig3", target, x)
@review_sig3.register_fake
def _(x, target="torch"):
    return torch.empty_like(x)
mojo_compile.register_impl("review_sig3", "torch", lambda x: torch.sigmoid(x) * 3.0, **lowering.TRACEABLE)

def search(x):
    return torch.sigmoid(x) * 3.0
def rep(x):
    return torch.ops.mojo.review_sig3(x)
mojo_compile.register_pattern("user.sig3", search, rep, [(torch.randn(4, 8),)])

class M(torch.nn.Module):
    def __init__(s):
        super().__init__(); s.lin = torch.nn.Linear(8, 8)
    def forward(s, x):
        return search(s.lin(x)).sum()
torch.manual_seed(0)
m = M(); x = torch.randn(3, 4, 8)
ref = m(x); ref.backward(); gref = m.lin.weight.grad.clone(); m.zero_grad()
try:
    out = torch.compile(m, backend="mojo", options=OPT)(x)
    out.backward()
    print("sites", [s.pattern for s in mojo_compile.last_report().sites])
    print("out diff", (out - ref).abs().item(), "grad diff", (m.lin.weight.grad - gref).abs().max().item() if m.lin.weight.grad is not None else "NO GRAD")
except Exception as e:
    print("RAISED", type(e).__name__, str(e)[:500])
