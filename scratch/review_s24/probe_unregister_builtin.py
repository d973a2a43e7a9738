import conftest  # noqa
import sys, torch
import mojo_compile
from mojo_compile import patterns
from test_pattern_cache import tiny_llama, compiled_logits
model, ids = tiny_llama(), torch.randint(0, 128, (2, 11))
first = sys.argv[1] == "compile_first"
with torch.no_grad():
    if first:
        _, c = compiled_logits(model, ids); print("first", dict(c))
    for name in ("rms_norm.llama", "add_rms_norm.llama"):
        mojo_compile.unregister_pattern(name)
    _, c = compiled_logits(model, ids); print("after unregister", dict(c))
    print({n.meta.get("mojo_pattern") for g in mojo_compile.last_report().graphs for n in []})
