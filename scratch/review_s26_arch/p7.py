from h import *
from p2 import fams
from p4 import fams as f4; fams.update(f4)
fams["qwen2"] = lambda: T.Qwen2Config(**C)
fams["starcoder2"] = lambda: T.Starcoder2Config(**C)
fams["phi"] = lambda: T.PhiConfig(**C, partial_rotary_factor=0.5)
import sys
for n in sys.argv[1:]:
    check(n + "_inductor", fams[n](), targets=("torch",), inner="inductor", fac=2.0, floor=1e-5)
