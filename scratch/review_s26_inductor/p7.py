from h import *
import copy
sys.path.insert(0, "/work/main/tests")
from test_pieces import TinyLM, VOCAB, SMALL_PIECES
torch.manual_seed(0)
model = TinyLM(); eager = copy.deepcopy(model); exact = copy.deepcopy(model).double()
ids = torch.randint(0, VOCAB, (2, 7)); labels = torch.randint(0, VOCAB, (2, 7))
for target in ["torch", "ttx"]:
    torch._dynamo.reset(); mojo_compile.reset_report()
    m = copy.deepcopy(model)
    c = torch.compile(m, backend="mojo", options={**SMALL_PIECES, "target": target})
    loss = c(ids, labels)
    print(target, "pieces", mojo_compile.last_report().graphs[-1].pieces, sites())
    # retain_graph twice
    loss.backward(retain_graph=True); g1 = {n: p.grad.clone() for n, p in m.named_parameters()}
    loss.backward(); g2 = {n: p.grad.clone() for n, p in m.named_parameters()}
    e = copy.deepcopy(model); le = e(ids, labels); le.backward(retain_graph=True); le.backward()
    ge = {n: p.grad for n, p in e.named_parameters()}
    print(" retain_graph: max rel diff vs eager (2x accum):", max(rel(g2[n], ge[n]) for n in ge), "first==half", max(rel(2*g1[n], g2[n]) for n in ge))
    # grads wrt a subset
    m.zero_grad()
    loss = c(ids, labels)
    gs = torch.autograd.grad(loss, [m.blocks[1].gate.weight, m.embed.weight])
    le = e(ids, labels); ges = torch.autograd.grad(le, [e.blocks[1].gate.weight, e.embed.weight])
    print(" subset grads rel", [rel(a, b) for a, b in zip(gs, ges)], "grads leaked into .grad:", [n for n, p in m.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0])
    # double backward
    loss = c(ids, labels)
    try:
        gs = torch.autograd.grad(loss, [m.blocks[1].gate.weight], create_graph=True)
        gs[0].pow(2).sum().backward(); print(" double backward ran", )
    except Exception as ex: print(" double backward error:", type(ex).__name__, str(ex)[:200])
    # grad only w.r.t. input embeddings (inputs_embeds requires grad, params frozen)
