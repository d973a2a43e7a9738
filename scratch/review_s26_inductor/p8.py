from h import *
import copy
from test_hf_models import build
fams = sys.argv[1].split(",")
targets = sys.argv[2].split(",")
dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[sys.argv[3]]
for fam in fams:
  model = build(fam, dtype).train()
  for p in model.parameters(): p.requires_grad_(True)
  exact = copy.deepcopy(model).double()
  eager = copy.deepcopy(model)
  torch.manual_seed(1)
  ids = torch.randint(3, 256, (2, 8)); am = torch.ones(2, 8, dtype=torch.long); am[1, :3] = 0  # left padding
  for target in targets:
    m = copy.deepcopy(model)
    torch._dynamo.reset(); mojo_compile.reset_report()
    try:
        c = torch.compile(m, backend="mojo", options={"target": target})
        out = c(input_ids=ids, attention_mask=am, labels=ids)
        out.loss.backward()
    except Exception as ex:
        print(f"[{fam}/{target}] CRASH {type(ex).__name__}: {str(ex)[:400]}"); continue
    s = sites()
    if True:
        eager.zero_grad(set_to_none=True); exact.zero_grad(set_to_none=True)
        oe = eager(input_ids=ids, attention_mask=am, labels=ids); oe.loss.backward()
        od = exact(input_ids=ids, attention_mask=am, labels=ids); od.loss.backward()
        ge = {n: p.grad for n, p in eager.named_parameters()}; gd = {n: p.grad for n, p in exact.named_parameters()}
    bad = []
    # compare logits only on non-padded rows? padded query rows: HF gives something defined; compare all
    for nm, a, b, d in [("logits", out.logits, oe.logits, od.logits), ("loss", out.loss, oe.loss, od.loss)]:
        rc, re_ = rel(a, d), rel(b, d)
        if rc > 2 * re_ + 1e-6: bad.append(f"{nm} rc={rc:.2e} re={re_:.2e}")
    for n, p in m.named_parameters():
        rc, re_ = rel(p.grad, gd[n]), rel(ge[n], gd[n])
        if rc > 2 * re_ + 1e-6: bad.append(f"{n} rc={rc:.2e} re={re_:.2e}")
    print("  nan: compiled", any(p.grad.isnan().any().item() for p in m.parameters()), "eager", any(g.isnan().any().item() for g in ge.values()), "fp64", any(g.isnan().any().item() for g in gd.values()), "logits", out.logits.isnan().any().item(), oe.logits.isnan().any().item(), od.logits.isnan().any().item())
    print("  max rel compiled-vs-eager: logits %.2e grads %.2e" % (rel(out.logits, oe.logits), max(rel(p.grad, ge[n]) for n, p in m.named_parameters())))
    print("  gradnorm ratio", [round((p.grad.norm() / gd[n].norm()).item(), 3) for n, p in list(m.named_parameters())[:3]])
    print(f"[{fam}/{target}/{sys.argv[3]}] {'BAD ' + '; '.join(bad[:6]) if bad else 'ok'} nsites={len(s)} {sorted(set(x.split(':')[0] for x in s))}", flush=True)
