from h import *
from p2 import fams
from p4 import fams as f4; fams.update(f4)
fams["stablelm"] = lambda: T.StableLmConfig(**C, partial_rotary_factor=0.5, qk_layernorm=True, use_parallel_residual=True)
fams["phi_qk"] = lambda: T.PhiConfig(**C, partial_rotary_factor=0.5, qk_layernorm=True)
fams["starcoder2"] = lambda: T.Starcoder2Config(**C)
import sys
for n in sys.argv[1:]:
    try:
        check(n + "_bf16", fams[n](), dtype=torch.bfloat16, fac=1.5, floor=1e-3)
    except Exception as ex:
        print(n, "HARNESS FAIL", type(ex).__name__, str(ex)[:300])
