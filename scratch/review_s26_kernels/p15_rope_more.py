import itertools
from kh import *
import p3_rope as R
bf, f16, f32 = torch.bfloat16, torch.float16, torch.float32
for D, RR in ((8, 4), (40, 20), (40, 2), (96, 64), (256, 128), (80, 80)):
    for sd in (1, 2):
        R.run_rope(2, 5, 3, 1, D, RR, True, True, sd, "strided" if sd == 2 else "padrows", bf, f32, "B")
        R.run_rope(1, 1, 4, 2, D, RR, True, True, sd, "offset", f32, f16, "2d")
        R.run_rope(3, 17, 2, 2, D, RR, False, True, sd, "contig", f16, f32, "bexp")
print("BAD", R.bad)
