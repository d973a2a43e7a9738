from h import *
import copy
if sys.argv[1] == "fix":
    import fixsim_plugin2  # noqa
from test_pieces import TinyLM, VOCAB, SMALL_PIECES
torch.manual_seed(0)
model = TinyLM(); eager = copy.deepcopy(model); exact = copy.deepcopy(model).double()
ids = torch.randint(0, VOCAB, (2, 7)); labels = torch.randint(0, VOCAB, (2, 7))
c = torch.compile(model, backend="mojo", options={**SMALL_PIECES, "cpp_wrapper": True})
try:
    loss = c(ids, labels); print("pieces", mojo_compile.last_report().graphs[-1].pieces, "requires_grad", loss.requires_grad)
    loss.backward()
    eager(ids, labels).backward(); exact(ids, labels).backward()
    ge = dict(eager.named_parameters()); gd = dict(exact.named_parameters())
    print("worst ratio", max(rel(p.grad, gd[n].grad) / (rel(ge[n].grad, gd[n].grad) + 1e-9) for n, p in model.named_parameters()))
except Exception as ex: print("CRASH", type(ex).__name__, str(ex)[:300])
