import sys
import torch
from h import safe
import c1, c2, c3
import torch.nn.functional as F
T = sys.argv[1]; inner = sys.argv[2]; W = sys.argv[3] if len(sys.argv) > 3 else "all"

def mk_ce_v(s):
    B, S, V = s
    lab = torch.randint(0, V, (B, S)); lab.view(-1)[::3] = -100
    return [torch.randn(B, S, V) * 2, lab]

def mk_lce_v(s):
    B, S, V = s
    lab = torch.randint(0, V, (B, S)); lab.view(-1)[::3] = -100
    return [torch.randn(B, S, 8), torch.randn(V, 8) / 3, lab]

hid = [(2, 5, 16), (2, 5, 24), (2, 3, 300), (2, 3, 1100), (2, 3, 7)]
todo = [
    ("rms", c1.rms, c1.mk_rms, hid),
    ("add_rms_used", c1.add_rms_used, c1.mk_add, hid),
    ("ln", c1.ln, c1.mk_ln, hid),
    ("swiglu", c1.swiglu, c1.mk_gu, hid),
    ("chunked", c1.chunked, c1.mk_ch, hid),
    ("ce_v", c3.ce_hf, mk_ce_v, [(2, 5, 11), (2, 5, 13), (2, 3, 500), (2, 3, 2100), (1, 3, 7)]),
    ("lce_v", c3.lce, mk_lce_v, [(2, 5, 11), (2, 5, 13), (2, 3, 500), (2, 3, 2100), (1, 3, 7)]),
]
for name, fn, mk, shapes in todo:
    if W != "all" and name not in W.split(","):
        continue
    safe(name + "-H", fn, mk, shapes, target=T, mode="auto", inner=inner)
