from h import *
import traceback
import torch.nn.functional as F
H = 32
def f(x, w):
    return F.linear(x, w) * 2
torch.manual_seed(0)
w = torch.randn(48, H)
for be, opts in [("inductor", {"cpp_wrapper": True}), ("mojo", {"cpp_wrapper": True}), ("mojo", {"cpp_wrapper": True, "backward_piece_mb": 0})]:
    torch._dynamo.reset()
    c = torch.compile(f, backend=be, options=opts, dynamic=True)
    xx = torch.randn(2, 5, H)
    try:
        with torch.no_grad():
            y = c(xx, w); print(be, opts, "rel", rel(y, f(xx, w)))
    except Exception as ex:
        print(be, opts, "CRASH", type(ex).__name__, str(ex)[:200]); traceback.print_exc(limit=-4)
torch._dynamo.reset(); mojo_compile.reset_report()
c = torch.compile(f, backend="mojo", options={"inner_compiler": "eager"}, dynamic=True); c(torch.randn(2, 5, H), w)
print(mojo_compile.last_report().graphs[-1].graph)
