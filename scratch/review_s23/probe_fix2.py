import sys, functools
sys.path[:0] = ["/work/main/tests", "/work/main"]
import torch, mojo_compile
from mojo_compile import patterns as P
import test_findings  # noqa
_orig = P.make_fx
def fake_make_fx(fn, **kw):
    return _orig(fn, tracing_mode="fake", **kw)
P_ops = P._ops_without_backward
def patched(pattern):
    P.make_fx = fake_make_fx
    try:
        return P_ops(pattern)
    finally:
        P.make_fx = _orig
@torch.library.custom_op("mojo::s23_cuda_only2", mutates_args=(), device_types="cuda")
def cuda_only(x: torch.Tensor, target: str = "torch") -> torch.Tensor:
    return torch.sigmoid(x) * 3.0
cuda_only.register_fake(lambda x, target="torch": torch.empty_like(x))
cuda_only.register_autograd(lambda ctx, g: (g, None))
@torch.library.custom_op("mojo::s23_inf2", mutates_args=(), device_types="cuda")
def inf(x: torch.Tensor, target: str = "torch") -> torch.Tensor:
    return torch.sigmoid(x) * 3.0
inf.register_fake(lambda x, target="torch": torch.empty_like(x))
def search(x):
    return torch.sigmoid(x) * 3.0
p = mojo_compile.register_pattern("user.a", search, lambda x: cuda_only(x), [(torch.randn(4, 8),)])
q = mojo_compile.register_pattern("user.b", search, lambda x: inf(x), [(torch.randn(4, 8),)], priority=1)
print("with formula:", patched(p), " without:", patched(q))
