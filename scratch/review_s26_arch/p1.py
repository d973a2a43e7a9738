from h import *
fams = {
 "qwen2": lambda: T.Qwen2Config(**C),
 "starcoder2": lambda: T.Starcoder2Config(**C),
 "stablelm": lambda: T.StableLmConfig(**C, partial_rotary_factor=0.5, qk_layernorm=True, use_parallel_residual=True),
 "phi": lambda: T.PhiConfig(**C, partial_rotary_factor=0.5),
}
import sys
for n in (sys.argv[1:] or fams):
    check(n, fams[n]())
