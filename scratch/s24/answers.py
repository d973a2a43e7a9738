"""Which mask questions a decode / prefill compile asks (pattern_cache.remembered), and how long their proofs take."""
import json, os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import torch
import bench_decode as bd
from mojo_compile import pattern_cache

asked = []
real = pattern_cache.remembered
def rec(kind, question, answer):
    t = time.perf_counter(); r = real(kind, question, answer); asked.append((kind, len(question), time.perf_counter() - t, question[:300]))
    return r
pattern_cache.remembered = rec
model_name, workload, ctx = sys.argv[1], sys.argv[2], int(sys.argv[3])
config = bd.make_config(model_name, True)
if len(sys.argv) > 4:
    config.hidden_size, config.intermediate_size = int(sys.argv[4]), int(sys.argv[4]) * 2
model = bd.build(config, "cpu")
os.environ.setdefault("MOJO_INNER", "eager")
with torch.no_grad():
    if workload == "prefill":
        ids = torch.randint(3, config.vocab_size, (1, ctx))
        f = torch.compile(lambda ids: model(input_ids=ids, use_cache=False).logits, backend="mojo")
        f(ids)
    else:
        cache, counters = bd.make_cache(config, 1, ctx, ctx + bd.SLACK, "cpu")
        ids = torch.randint(3, config.vocab_size, (1, 1))
        pos = torch.full((1, 1), ctx, dtype=torch.long)
        torch.compile(bd.step_fn(model), backend="mojo")(ids, pos, cache)
for kind, n, s, q in asked:
    print(kind, n, f"{s:.3f}s", q)
