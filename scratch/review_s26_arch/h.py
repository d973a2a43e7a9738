"""Probe harness: tiny HF models compiled with backend mojo vs eager vs an fp64 copy."""
import copy, os, sys, traceback
sys.path[:0] = ["/work/main/tests", "/work/main"]
os.environ.setdefault("MOJO_CACHE_DIR", "/tmp/arch_cache")
import conftest  # noqa: F401
import torch
import transformers as T
import mojo_compile

C = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
         num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def build(cfg, dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    cfg._attn_implementation = getattr(cfg, "_attn_implementation", None) or "sdpa"
    m = T.AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return m.to(dtype)


def inputs(B=2, S=11, V=128, pad=3):
    torch.manual_seed(1)
    ids = torch.randint(3, V, (B, S))
    am = torch.ones(B, S, dtype=torch.long)
    am[1, :pad] = 0  # left padding on row 1
    labels = ids.clone(); labels[1, :pad] = -100
    return ids, am, labels


def step(m, ids, am, labels, train=False, seed=None):
    m.zero_grad(set_to_none=True)
    if seed is not None: torch.manual_seed(seed)
    out = m(input_ids=ids, attention_mask=am, labels=labels)
    m = getattr(m, "_orig_mod", m)
    out.loss.backward()
    return out.logits.detach(), out.loss.detach(), {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}


def check(name, cfg, targets=("torch", "ttx"), inner="eager", dtype=torch.float32, train=False, opts=None,
          model_fn=None, fac=2.0, floor=1e-6):
    model = model_fn() if model_fn else build(cfg, dtype)
    if train: model.train()
    else: model.eval()
    gold = copy.deepcopy(model).double()
    ids, am, labels = inputs(V=model.config.vocab_size)
    snapshot = (ids.clone(), am.clone(), labels.clone())
    eL, eloss, eg = step(model, ids, am, labels)
    dL, dloss, dg = step(gold, ids, am, labels)
    res = {}
    for t in targets:
        torch._dynamo.reset(); mojo_compile.reset_report()
        o = {"target": t, "inner_compiler": inner}; o.update(opts or {})
        try:
            cm = torch.compile(model, backend="mojo", options=o)
            cL, closs, cg = step(cm, ids, am, labels)
        except Exception as ex:
            print(f"[{name}/{t}] CRASH {type(ex).__name__}: {str(ex)[:400]}")
            traceback.print_exc(limit=-3)
            res[t] = "crash"; continue
        rep = mojo_compile.last_report()
        sites = [(s.source, s.op) for s in rep.sites]
        bad = []
        for k, c, e, d in [("logits", cL, eL, dL), ("loss", closs, eloss, dloss)] + [
                (n, cg.get(n), eg[n], dg[n]) for n in eg]:
            if c is None:
                bad.append((k, "missing grad")); continue
            ce, ee = rel(c, d), rel(e, d)
            if ce > fac * ee + floor:
                bad.append((k, f"{ce:.3g} vs eager {ee:.3g}"))
        extra = [n for n in cg if n not in eg]
        if extra: bad.append(("extra grads", extra))
        mut = not all(torch.equal(a, b) for a, b in zip(snapshot, (ids, am, labels)))
        print(f"[{name}/{t}] {'BAD' if bad or mut else 'ok'} mut={mut} sites={len(sites)}: "
              f"{sorted(set(s[1] for s in sites))} counts={rep.counts()}")
        for b in bad[:12]: print("     ", b)
        res[t] = (bad, sites, rep)
    return res
