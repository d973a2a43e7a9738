import conftest  # noqa
import torch, mojo_compile
from mojo_compile import patterns as P
@torch.library.custom_op("mojo::revs23_inf", mutates_args=())
def inf_op(x: torch.Tensor, target: str = "torch") -> torch.Tensor:
    return torch.sigmoid(x) * 3.0
inf_op.register_fake(lambda x, target="torch": torch.empty_like(x))
def search(x):
    return torch.sigmoid(x) * 3.0
mojo_compile.register_pattern("user.sig3", search, lambda x: inf_op(x), [(torch.randn(4, 8),)])
teacher, student = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
def step(x):
    with torch.no_grad():
        t = search(teacher(x))
    return ((student(x) - t) ** 2).sum()
x = torch.randn(3, 4, 8)
out = torch.compile(step, backend="mojo", options={"inner_compiler": "eager", "target": "torch"})(x)
print("SITES", [s.pattern for s in mojo_compile.last_report().sites], P._REFUSAL.get("verdict"))
out.backward()
