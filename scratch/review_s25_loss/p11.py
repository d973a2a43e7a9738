import conftest  # noqa
import torch, torch.nn.functional as F, mojo_compile
V = 8
def f(x, t):
    return F.cross_entropy(x.float().view(-1, V), t)
x = torch.randn(2, 5, 2 * V).bfloat16(); t = torch.randint(0, V, (20,))
print("eager", f(x, t))
try:
    print(torch.compile(f, backend="mojo", options={"inner_compiler": "eager"}, dynamic=True)(x, t))
except Exception as e:
    import traceback; traceback.print_exc()
