"""Simulated fix: register R4b (GLM: half cos repeat-interleaved inside apply) patterns, then compile GLM / GLM4."""
from h import *
import mojo_compile.patterns.rope as R
from mojo_compile.patterns import register_pattern
mojo = torch.ops.mojo


import os
LAZY = os.environ.get("LAZY") == "1"

def r4b(seq_dim, partial):
    ud = 3 - seq_dim
    def embed(x, c, s):
        rot = c.shape[-1]
        if not partial:
            return x * c + R.rotate_every_two(x) * s
        return torch.cat([x[..., :rot] * c + R.rotate_every_two(x[..., :rot]) * s, x[..., rot:]], dim=-1)
    def search(q, k, cos, sin):
        c, s = cos.unsqueeze(ud), sin.unsqueeze(ud)
        c = c[..., : c.shape[-1] // 2].repeat_interleave(2, dim=-1)
        s = s[..., : s.shape[-1] // 2].repeat_interleave(2, dim=-1)
        return embed(q, c, s), embed(k, c, s)
    def replace(q, k, cos, sin):
        c = cos[..., : cos.shape[-1] // 2].repeat_interleave(2, dim=-1)
        s = sin[..., : sin.shape[-1] // 2].repeat_interleave(2, dim=-1)
        return mojo.rope(q, k, c, s, c.shape[-1], True, seq_dim, False)
    return search, replace


for partial in (False, True):
    register_pattern("sim.rope.r4b" + (".partial" if partial else ""), *r4b(2, partial), R._rope_examples(2, partial),
                     priority=6, lazy=LAZY, extra_check=R._rope_check(2, partial, True), family="rope")
from p2 import fams
import sys
for n in sys.argv[1:]:
    check(n + "_fix", fams[n](), targets=tuple(os.environ.get("TGTS", "torch,ttx").split(",")))
