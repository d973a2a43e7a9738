"""The suggested fix for finding 1, monkeypatched: rows_agree raises unless the rows provably agree. The other view
compiles under dynamic=True, and the ordinary [B, T, V] -> [-1, V] spelling still fuses (both families)."""
import conftest  # noqa
import torch, torch.nn.functional as F
from torch.fx.experimental.symbolic_shapes import statically_known_true
import mojo_compile
from mojo_compile.patterns import cross_entropy as ce, linear_cross_entropy as lce


def rows_agree(x, labels):
    if labels.dim() >= 1 and not statically_known_true(labels.shape[0] == x.shape[0]):
        raise RuntimeError("the loss reads another view of the logits than [N, V]")


ce.rows_agree = lce.rows_agree = rows_agree
V, K = 8, 2
x = torch.randn(2, 5, K * V).bfloat16()
h, w = torch.randn(2, 5, 4).bfloat16(), torch.randn(V, 4).bfloat16()
cases = {
    "other view": (lambda x, t: F.cross_entropy(x.float().view(-1, V), t), (x, torch.randint(0, V, (20,)))),
    "ordinary": (lambda x, t: F.cross_entropy(x.float().view(-1, K * V), t), (x, torch.randint(0, K * V, (10,)))),
    "lm head": (lambda h, w, t: F.cross_entropy(F.linear(h, w).float().view(-1, V), t), (h, w, torch.randint(0, V, (10,)))),
}
for name, (fn, args) in cases.items():
    for dynamic in (None, True):
        torch._dynamo.reset(); mojo_compile.reset_report()
        got = torch.compile(fn, backend="mojo", options={"inner_compiler": "eager"}, dynamic=dynamic)(*args)
        print(name, dynamic, got.item(), fn(*args).item(), [s.pattern for s in mojo_compile.last_report().sites])
