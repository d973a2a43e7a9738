import sys
from h import safe
import c1, c2, c3
T = sys.argv[1] if len(sys.argv) > 1 else "torch"
W = sys.argv[2] if len(sys.argv) > 2 else "all"
sh = [(2, 7), (2, 9), (3, 33)]
todo = [
    ("add_rms_used", c1.add_rms_used, c1.mk_add, [(2, 7, 16), (2, 9, 16), (3, 33, 16)], "auto"),
    ("chunked_mlp", c1.chunked_mlp, c1.mk_mlp, [(2, 7, 16), (2, 9, 16), (3, 1, 16)], "dyn"),
    ("hf_mask", c2.sdpa_hf, c2.mk_qkv_am, sh, "dyn"),
    ("rope_full", c2.rope_full, c2.mk_rope_full, sh, "auto"),
    ("lce", c3.lce, c3.mk_lce, sh, "auto"),
]
for name, fn, mk, shapes, mode in todo:
    if W != "all" and name not in W.split(","):
        continue
    safe(name + "-ind", fn, mk, shapes, target=T, mode=mode, inner="inductor")
