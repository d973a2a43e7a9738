"""rope / swiglu / rms_norm / add_rms_norm / add_layer_norm through the fake torch_npu, vs the torch reference."""
import sys
import conftest  # noqa: F401
import torch
sys.path.insert(0, "scratch/review_s26_npu")
import fake_torch_npu as fake
sys.modules["torch_npu"] = fake.module()
from mojo_compile.ops import gated_act, layer_norm, rope
from mojo_compile.ops import rms_norm as rn

torch.manual_seed(0)


def ulps(a, b):
    return (a.double() - b.double()).abs().max().item() / (torch.finfo(a.dtype).eps * b.double().abs().max().item())


def show(name, reason, fn, ref_fn, args):
    before = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    try:
        outs = fn(*args)
    except fake.Refused as e:
        print(f"{name:44s} reason={reason!r:14.14} REFUSED: {e}")
        return
    refs = ref_fn(*args)
    outs = outs if isinstance(outs, tuple) else (outs,)
    refs = refs if isinstance(refs, tuple) else (refs,)
    u = [round(ulps(o, r), 2) for o, r in zip(outs, refs) if o.numel() and o.is_floating_point()]
    shapes_ok = all(o.shape == r.shape and o.dtype == r.dtype for o, r in zip(outs, refs))
    mutated = any(isinstance(a, torch.Tensor) and not torch.equal(a, b) for a, b in zip(args, before))
    print(f"{name:44s} reason={reason!r:14.14} ulps={u} shapes/dtypes ok={shapes_ok} mutated={mutated}")


N = fake.on_npu
# ---------------------------------------------------------------- rope
for seq_dim in (1, 2):
    for interleaved in (False, True):
        for cos_b in (1, 2):
            shape_q = (2, 5, 4, 32) if seq_dim == 1 else (2, 4, 5, 32)
            shape_k = (2, 5, 2, 32) if seq_dim == 1 else (2, 2, 5, 32)
            q, k = torch.randn(shape_q, dtype=torch.bfloat16), torch.randn(shape_k, dtype=torch.bfloat16)
            ang = torch.rand(cos_b, 5, 16) * 6
            ang = torch.cat([ang, ang], -1) if not interleaved else ang.repeat_interleave(2, -1)
            cos, sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
            args = (q, k, cos, sin, 32, interleaved, seq_dim, False)
            reason = rope._npu_reason(N(q), N(k), N(cos), N(sin), 32, interleaved, seq_dim, False)
            show(f"rope seq_dim={seq_dim} inter={interleaved} cos[{cos_b},S,D]", reason, rope.npu_forward,
                 rope.reference, args)
# decode S=1 BSND with per-batch tables
q, k = torch.randn(2, 1, 4, 32, dtype=torch.bfloat16), torch.randn(2, 1, 2, 32, dtype=torch.bfloat16)
ang = torch.rand(2, 1, 16) * 6
ang = torch.cat([ang, ang], -1)
cos, sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
show("rope decode S=1 BSND cos[B,1,D]", rope._npu_reason(N(q), N(k), N(cos), N(sin), 32, False, 1, False),
     rope.npu_forward, rope.reference, (q, k, cos, sin, 32, False, 1, False))
# interleave with B*N >= 1000 (B=40, N=32) but B, N < 1000
q, k = torch.randn(40, 2, 32, 16, dtype=torch.bfloat16), torch.randn(40, 2, 8, 16, dtype=torch.bfloat16)
ang = (torch.rand(2, 8) * 6).repeat_interleave(2, -1)
cos, sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
show("rope interleave B=40 N=32 (B*N=1280)", rope._npu_reason(N(q), N(k), N(cos), N(sin), 16, True, 1, False),
     rope.npu_forward, rope.reference, (q, k, cos, sin, 16, True, 1, False))
# fp32 q with fp32 tables
q, k = torch.randn(2, 5, 4, 32), torch.randn(2, 5, 2, 32)
ang = torch.cat([torch.rand(5, 16) * 6] * 2, -1)
show("rope fp32", rope._npu_reason(N(q), N(k), N(ang.cos()), N(ang.sin()), 32, False, 1, False),
     rope.npu_forward, rope.reference, (q, k, ang.cos(), ang.sin(), 32, False, 1, False))
# ---------------------------------------------------------------- swiglu
gu = torch.randn(3, 5, 2 * 48, dtype=torch.bfloat16)
show("swiglu contiguous", gated_act._npu_reason(N(gu), "silu", True), gated_act.npu_fused_forward,
     gated_act.fused_reference, (gu, "silu", True))
big = torch.randn(5, 3, 2 * 48, dtype=torch.bfloat16).transpose(0, 1)
show("swiglu non-contiguous gate_up", gated_act._npu_reason(N(big), "silu", True), gated_act.npu_fused_forward,
     gated_act.fused_reference, (big, "silu", True))
empty = torch.randn(0, 2 * 48, dtype=torch.bfloat16)
show("swiglu empty", gated_act._npu_reason(N(empty), "silu", True), gated_act.npu_fused_forward,
     gated_act.fused_reference, (empty, "silu", True))
d64 = torch.randn(4, 2 * 48, dtype=torch.float64)
show("swiglu fp64", gated_act._npu_reason(N(d64), "silu", True), gated_act.npu_fused_forward,
     gated_act.fused_reference, (d64, "silu", True))
# ---------------------------------------------------------------- rms norm
for cast in ("normed", "output", "rstd"):
    for xd, wd, off in ((torch.bfloat16, torch.bfloat16, 0.0), (torch.bfloat16, torch.float32, 0.0),
                        (torch.float32, torch.float32, 1.0), (torch.float16, torch.float16, 0.0),
                        (torch.bfloat16, torch.bfloat16, 1.0), (torch.float32, torch.bfloat16, 0.0)):
        x = torch.randn(3, 5, 64, dtype=xd)
        w = (1 + 0.1 * torch.randn(64)).to(wd)
        reason = rn._npu_reason(N(x), N(w), off, cast)
        if reason is None:
            show(f"rms {cast} x={xd} w={wd} off={off}", reason, rn.npu_forward, rn.reference, (x, w, 1e-6, off, cast))
            r = torch.randn(3, 5, 64, dtype=xd)
            show(f"add_rms {cast} x={xd} w={wd} off={off}", reason, rn.npu_add_forward, rn.add_reference,
                 (x, r, w, 1e-6, off, cast))
        else:
            print(f"rms {cast} x={xd} w={wd} off={off}: falls back: {reason}")
x = torch.randn(0, 64, dtype=torch.bfloat16)
show("add_rms empty rows", rn._npu_reason(N(x), N(w.to(x.dtype)), 0.0, "output"), rn.npu_add_forward,
     rn.add_reference, (x, x.clone(), w.to(x.dtype), 1e-6, 0.0, "output"))
# ---------------------------------------------------------------- add layer norm
x, r = torch.randn(3, 5, 64, dtype=torch.bfloat16) * 2 + 1, torch.randn(3, 5, 64, dtype=torch.bfloat16)
w, b = (1 + 0.3 * torch.randn(64)).to(torch.bfloat16), torch.randn(64).to(torch.bfloat16)
show("add_layer_norm bf16", layer_norm._npu_reason(N(x), N(w), N(b)), layer_norm.npu_add_forward,
     layer_norm.add_reference, (x, r, w, b, 1e-5))
