"""Dropout in training: compiled vs eager with the same seed; and compiled vs no-dropout."""
from h import *
import sys, os
fams = {
 "llama_eagerattn": lambda: T.LlamaConfig(**C, attention_dropout=0.5, attn_implementation="eager"),
 "llama_sdpa": lambda: T.LlamaConfig(**C, attention_dropout=0.5),
 "qwen2_eagerattn": lambda: T.Qwen2Config(**C, attention_dropout=0.5, attn_implementation="eager"),
 "starcoder2": lambda: T.Starcoder2Config(**C, residual_dropout=0.5, embedding_dropout=0.5, attention_dropout=0.5, attn_implementation="eager"),
 "phi": lambda: T.PhiConfig(**C, resid_pdrop=0.5, embd_pdrop=0.5, attention_dropout=0.5, attn_implementation="eager"),
 "phi3": lambda: T.Phi3Config(**C, resid_pdrop=0.5, embd_pdrop=0.5, attention_dropout=0.5, attn_implementation="eager"),
 "gemma2": lambda: T.Gemma2Config(**C, head_dim=8, attention_dropout=0.5, attn_implementation="eager"),
 "stablelm": lambda: T.StableLmConfig(**C, hidden_dropout=0.5, attention_dropout=0.5, attn_implementation="eager"),
 "gpt_neox": lambda: T.GPTNeoXConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
     num_attention_heads=4, hidden_dropout=0.5, attention_dropout=0.5, attn_implementation="eager"),
}
tg = tuple(os.environ.get('TGTS','torch,ttx').split(','))
for n in (sys.argv[1:] or fams):
    cfg = fams[n]()
    model = build(cfg).train()
    ids, am, labels = inputs()
    eL, eloss, eg = step(model, ids, am, labels, seed=123)
    eL2, eloss2, _ = step(model, ids, am, labels, seed=123)
    model.eval(); nL, nloss, _ = step(model, ids, am, labels); model.train()
    for t in tg:
        torch._dynamo.reset(); mojo_compile.reset_report()
        cm = torch.compile(model, backend="mojo", options={"target": t, "inner_compiler": "eager"})
        cL, closs, cg = step(cm, ids, am, labels, seed=123)
        cLb, clossb, _ = step(cm, ids, am, labels, seed=123)
        torch._dynamo.reset()
        am_ = torch.compile(model, backend="aot_eager")
        aL, aloss, _ = step(am_, ids, am, labels, seed=123)
        rep = mojo_compile.last_report()
        print(f"[{n}/{t}] eager_repeat_eq={torch.equal(eL, eL2)} comp==eager:{rel(cL, eL):.2e} comp==aot_eager:{rel(cL, aL):.2e} "
              f"aot_eager==eager:{rel(aL, eL):.2e} comp==nodrop:{rel(cL, nL):.2e} eager==nodrop:{rel(eL, nL):.2e} "
              f"losses c={closs.item():.4f} e={eloss.item():.4f} a={aloss.item():.4f} nd={nloss.item():.4f} counts={dict(rep.counts())} maxgrad={max(rel(cg[k], eg[k]) for k in eg):.2e} missing={[k for k in eg if k not in cg][:3]}")
