"""Gemma-style (1 + w) RMSNorm where the weight is cast to fp16 (not fp32) before the offset is added."""
import conftest  # noqa
import torch
import mojo_compile
torch.manual_seed(0)
H = 64

def gemma_w16(x, w):
    x32 = x.float()
    o = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)
    return (o * (1.0 + w.to(torch.float16))).to(x.dtype)

for xdt in (torch.float16, torch.bfloat16):
    x = torch.randn(4, H, dtype=xdt)
    w = 0.3 * torch.randn(H)  # fp32 weight
    got = torch.compile(gemma_w16, backend="mojo", options={"inner_compiler": "eager", "target": "torch"})(x, w)
    print(xdt, [s.pattern for s in mojo_compile.last_report().sites])
    want = gemma_w16(x, w)
    # the exact eager math in fp64 (every rounding eager makes, reproduced)
    w_eff = (1.0 + w.to(torch.float16)).double()
    x64 = x.double()
    print("  max |compiled - eager| =", (got.double() - want.double()).abs().max().item(),
          " max|eager| =", want.abs().max().item(), " equal:", torch.equal(got, want))
    alt = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * (1.0 + w)).to(xdt)
    print("  compiled == fp32-weight version:", torch.equal(got, alt))
    torch._dynamo.reset()
