from h import *
import p9  # noqa (fams setup) -- p9 runs nothing without argv
from p9 import fams
import sys
for n in sys.argv[1:]:
    check(n + "_bf16_noattn", fams[n](), dtype=torch.bfloat16, fac=1.5, floor=1e-3, targets=("torch",),
          opts={"disable": ["attention"]})
