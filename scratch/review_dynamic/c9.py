import sys
import torch
from h import safe
import c1, c2, c3
T, name = sys.argv[1], sys.argv[2]
def mk_ce_allign(s):
    B, S = s
    return [torch.randn(B, S, 11), torch.full((B, S), -100)]
cases = {
    "rms_b0": (c1.rms, c1.mk_rms, [(2, 7, 16), (0, 7, 16)]),
    "rms_h0": (c1.rms, c1.mk_rms, [(2, 7, 16), (2, 7, 0)]),
    "add_rms_b0": (c1.add_rms_used, c1.mk_add, [(2, 7, 16), (2, 9, 16), (0, 9, 16)]),
    "ln_h0": (c1.ln, c1.mk_ln, [(2, 7, 16), (2, 7, 0)]),
    "swiglu_i0": (c1.swiglu, c1.mk_gu, [(2, 7, 16), (2, 7, 0)]),
    "chunked_i0": (c1.chunked, c1.mk_ch, [(2, 7, 16), (2, 7, 0)]),
    "rope_s0": (c2.rope_full, c2.mk_rope_full, [(2, 7), (2, 9), (2, 0)]),
    "hf_b0": (c2.sdpa_hf, c2.mk_qkv_am, [(2, 7), (2, 9), (0, 9)]),
    "add_s0": (c2.sdpa_additive, c2.mk_qkv_am, [(2, 7), (2, 9), (2, 0)]),
    "causal_b0": (c2.sdpa_causal, c2.mk_qkv, [(2, 7), (0, 7)]),
    "ce_n0": (c3.ce_hf, c3.mk_ce, [(2, 7), (2, 9), (2, 0)]),
    "ce_allign": (c3.ce_hf, mk_ce_allign, [(2, 7), (2, 9), (3, 1)]),
    "lce_n0": (c3.lce, c3.mk_lce, [(2, 7), (2, 9), (0, 9)]),
    "lce_allign": (c3.lce, lambda s: c3.mk_lce(s)[:2] + [torch.full(s, -100)], [(2, 7), (2, 9), (3, 1)]),
}
fn, mk, shapes = cases[name]
safe(name, fn, mk, shapes, target=T, mode="auto")
safe(name + "-dyn", fn, mk, shapes, target=T, mode="dyn")
