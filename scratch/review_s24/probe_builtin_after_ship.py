"""Built-in fusions in the same process before and after pattern_cache.ship()."""
import os, tempfile
import conftest  # noqa
import torch
from mojo_compile import pattern_cache
from test_pattern_cache import tiny_llama, compiled_logits
model, ids = tiny_llama(), torch.randint(0, 128, (2, 11))
with torch.no_grad():
    a, ca = compiled_logits(model, ids)
    d = tempfile.mkdtemp()
    pattern_cache.ship(d)
    b, cb = compiled_logits(model, ids)
print("before", ca); print("after", cb); print("equal", torch.equal(a, b))
print("cache dir files", sorted(os.listdir(os.environ["MOJO_CACHE_DIR"])) if os.path.isdir(os.environ["MOJO_CACHE_DIR"]) else None)
