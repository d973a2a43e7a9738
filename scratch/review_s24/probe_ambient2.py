"""As probe_ambient.py, for ambient states that act through torch function modes or global torch settings."""
import contextlib
import conftest  # noqa
import torch
from torch._inductor import pattern_matcher as pm
from mojo_compile import patterns
exec(open("scratch/review_s24/probe_ambient.py").read().split("base = traces()")[0].split("patterns.load_fusions()")[1])
patterns.load_fusions()
base = traces()

@contextlib.contextmanager
def default_device_cpu():
    torch.set_default_device("cpu")
    try:
        yield
    finally:
        torch.set_default_device(None)

@contextlib.contextmanager
def fake_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode(allow_non_fake_inputs=True):
        yield

@contextlib.contextmanager
def matmul_prec():
    torch.set_float32_matmul_precision("medium")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision("highest")

for name, ctx in [("default_device_cpu", default_device_cpu), ("matmul_prec", matmul_prec),
                  ("enable_grad_off_set_grad", torch.no_grad)]:
    with ctx():
        other = traces()
    diff = [k for k in base if base[k] != other[k]]
    print(name, len(diff), diff[:6])
    if diff:
        k = diff[0]
        print("  plain:", base[k][:900]); print("  under:", other[k][:900])
