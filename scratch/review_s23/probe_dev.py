import conftest  # noqa
import sys, torch, mojo_compile
from mojo_compile import patterns as P
@torch.library.custom_op("mojo::revs23_cuda_only", mutates_args=(), device_types="cuda")
def cuda_only(x: torch.Tensor, target: str = "torch") -> torch.Tensor:
    return torch.sigmoid(x) * 3.0
cuda_only.register_fake(lambda x, target="torch": torch.empty_like(x))
cuda_only.register_autograd(lambda ctx, g: (g * 3.0 * torch.sigmoid(ctx.x) * (1 - torch.sigmoid(ctx.x)), None),
                            setup_context=lambda ctx, inputs, output: setattr(ctx, "x", inputs[0]))
def search(x):
    return torch.sigmoid(x) * 3.0
p = mojo_compile.register_pattern("user.sig3", search, lambda x: cuda_only(x), [(torch.randn(4, 8),)])
print("WITHOUT_BACKWARD", P._ops_without_backward(p))
