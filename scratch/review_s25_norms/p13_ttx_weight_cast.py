"""Finding 1 on the ttx target (Triton interpreter): the fused op uses the unrounded fp32 weight."""
import conftest  # noqa
import torch
import mojo_compile
torch.manual_seed(0)
def gemma3n_like(x, w):
    x32 = x.float(); return ((x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)) * w.to(x.dtype)).to(x.dtype)
x = torch.randn(8, 64, dtype=torch.bfloat16); w = 1 + 0.3 * torch.randn(64)
got = torch.compile(gemma3n_like, backend="mojo", options={"inner_compiler": "eager", "target": "ttx"})(x, w)
want = gemma3n_like(x, w)
unrounded = ((x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)) * w).to(x.dtype)
print([s.pattern for s in mojo_compile.last_report().sites], "mismatches vs eager:", (got != want).sum().item(),
      "vs unrounded-weight:", (got != unrounded).sum().item(), "of", got.numel())
