from kh import *
import p3_rope as R
bf, f16, f32 = torch.bfloat16, torch.float16, torch.float32
for D in (8, 40, 128):
    R.run_qk(2, 3, 4, 2, D, D, False, 2, "strided", bf, bf, f32, "normed", False, 1.0)
    R.run_qk(2, 3, 4, 2, D, D // 2 // 2 * 2, True, 1, "plain", bf, f32, f32, "normed", True, 1.0, eps=10.0)
    R.run_qk(1, 5, 3, 3, D, D, False, 2, "contig", f16, f16, f16, "output", True, 0.5, eps=0.0)
    R.run_qk(1, 5, 3, 3, D, 2, True, 2, "contig", f32, bf, f32, "normed", False, 0.0, eps=1e-30)
print("BAD", R.bad)
# zero heads with eps 0: NaN pattern must match
q = torch.randn(1, 2, 3, 16); q[0, 1] = 0; k = torch.randn(1, 1, 3, 16)
a = torch.randn(1, 3, 16)
for tgt in ("ttx", "torch"):
    o = mojo.qk_norm_rope(q, k, torch.ones(16), torch.ones(16), 0.0, 0.0, "normed", a.cos(), a.sin(), 16, False, 2, False, tgt)
    print(tgt, torch.isnan(o[0]).sum().item(), torch.isnan(o[1]).sum().item())
