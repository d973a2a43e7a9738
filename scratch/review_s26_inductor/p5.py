from h import *
torch.manual_seed(0)
H = 32
def rms(x, w):
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
x = torch.randn(2, 5, H, requires_grad=True); w = (1 + 0.1 * torch.randn(H)).requires_grad_()
for inner in ["eager", "inductor"]:
  for g in [True, False]:
    xx, ww = (x, w) if g else (x.detach(), w.detach())
    check(f"rms dyn inner={inner} grad={g}", rms, [xx, ww], "torch", options={"inner_compiler": inner}, dynamic=True)
    print(mojo_compile.last_report().graphs[-1].notes if mojo_compile.last_report().graphs else None)
