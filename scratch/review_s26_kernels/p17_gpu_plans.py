import sys
import gpu_plan  # noqa  (argv[1]: the device)
import p1_norms as N
import p2_gated_ce as GC
import p3_rope as R
import p8_attn_edges as E
import torch, itertools
bf, f16, f32 = torch.bfloat16, torch.float16, torch.float32
part = sys.argv[2]
if part == "norms":
    for shape, dt in itertools.product([(1, 3), (5, 17), (37, 100), (3, 2100), (2, 5000), (2, 8193), (1, 16385)], [bf, f32]):
        N.run_rms(shape, dt, dt, "normed", "plain", 1e-6, 0.0, True)
        N.run_rms(shape, dt, f32, "output", "padrows", 1e-6, 1.0, False)
        if shape[-1] <= 16384:
            N.run_ln(shape, dt, True, "plain", 1e-5, True)
            N.run_ln(shape, dt, False, "offset", 1e-5, False)
    N.run_rms((300, 64), bf, bf, "normed", "plain", 1e-6, 0.0, True)
    N.run_ln((300, 64), bf, True, "plain", 1e-5, True)
    print("norms bad", N.bad)
if part == "gated":
    for shape, dt in itertools.product([(1, 3), (5, 17), (3, 2, 100), (2, 2100)], [bf, f32]):
        for layout in ("plain", "halves", "padrows", "bcast"):
            GC.run_gated(shape, dt, "silu", layout)
        GC.run_fused(shape, dt, "gelu_tanh", False, "padrows")
    for n, v in ((1, 3), (5, 17), (3, 5000), (2, 9000)):
        GC.run_ce(n, v, bf, "padrows", -1, "mean", 0.1)
        GC.run_ce(n, v, f32, "plain", None, "sum", 0.0)
    print("gated/ce bad", GC.bad)
if part == "rope":
    for D, (S, HQ, HK) in itertools.product((8, 40, 96, 128), [(1, 4, 4), (3, 6, 2), (17, 3, 1)]):
        R.run_rope(2, S, HQ, HK, D, D, False, False, 2, "strided", bf, f32, "1")
        R.run_rope(2, S, HQ, HK, D, D // 2 // 2 * 2, True, True, 1, "padrows", f16, f16, "B")
        R.run_qk(2, S, HQ, HK, D, D, False, 2, "strided", bf, bf, f32, "normed", False, 0.0)
        R.run_qk(2, S, HQ, HK, D, D // 2 // 2 * 2, True, 1, "plain", f32, f32, f32, "output", True, 1.0)
    print("rope bad", R.bad)
if part == "attn":
    for SQ, SK, D in ((1, 20, 64), (5, 130, 40), (20, 20, 128), (70, 140, 64), (33, 40, 256)):
        for dt in (bf, f32):
            q = torch.randn(2, 4, SQ, D, dtype=dt); k = torch.randn(2, 2, SK, D, dtype=dt); v = torch.randn(2, 2, SK, D, dtype=dt)
            E.run(q, k, v, causal=True, tag=f"causal {SQ}x{SK} D{D} {dt}")
            E.run(q, k, v, m=torch.rand(2, 1, 1, SK) > 0.3, sinks=torch.randn(4), tag=f"keys+sinks {SQ}x{SK} D{D} {dt}")
            E.run(q, k, v, m=torch.randn(2, 1, SQ, SK), softcap=5.0, window=7, causal=True, tag=f"add+sc+win {SQ}x{SK} D{D} {dt}")
    print("attn bad", E.bad)
