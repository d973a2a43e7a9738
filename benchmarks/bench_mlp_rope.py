"""Gated MLP activation, RoPE and qk-norm + RoPE on the GPU: eager / Inductor / Liger / mojo, side by side.

    python benchmarks/bench_mlp_rope.py

Every implementation runs the HF spelling in bf16: eager is the spelling, Inductor `torch.compile` of it, Liger its
Triton op (LigerSiLUMulFunction, LigerFusedGateUpSiLUMulFunction, LigerRopeFunction; none for qk-norm + RoPE), mojo
`torch.compile(spelling, backend="mojo")` with its default (Inductor) inner compiler: the pattern replaced by the
Mojo op, whose Triton kernels Inductor launches itself. Forward: medians of CUDA-graph replays (GPU time);
forward + backward: plain calls of torch.autograd.grad (launch overhead included). Microseconds. GB/s counts the
bytes an ideal kernel moves; % is of the measured copy bandwidth.

Shapes: SwiGLU gate/up [16384, 11008] (and the fused [16384, 22016] form); RoPE q [1, 32, 16384, 128], k [1, 8, 16384,
128], cos/sin [1, 16384, 128]; Qwen3 qk-norm + RoPE on q [1, 16384, 32, 128], k [1, 16384, 8, 128].
"""
from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import bench, copy_bandwidth, fmt, print_table, rel_err  # noqa: E402

import mojo_compile  # noqa: E402

EPS = 1e-6
DEVICE, TOKENS, INTER = "cuda", 16384, 11008  # (a CPU smoke test shrinks them)


def swiglu(gate, up):
    return F.silu(gate) * up


def swiglu_fused(gate_up):  # Phi3
    gate, up = gate_up.chunk(2, dim=-1)
    return up * F.silu(gate)


def rotate_half(x):
    return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)


def rope(q, k, cos, sin):
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def qwen3_qk_norm_rope(q, k, q_weight, k_weight, cos, sin):
    def norm(x, w):
        x32 = x.to(torch.float32)
        return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype)
    return rope(norm(q, q_weight).transpose(1, 2), norm(k, k_weight).transpose(1, 2), cos, sin)


def liger_ops():
    try:
        from liger_kernel.ops.rope import LigerRopeFunction
        from liger_kernel.ops.swiglu import LigerFusedGateUpSiLUMulFunction, LigerSiLUMulFunction
        return {"swiglu": LigerSiLUMulFunction.apply, "swiglu_fused": LigerFusedGateUpSiLUMulFunction.apply,
                "rope": LigerRopeFunction.apply}
    except Exception as e:
        print(f"Liger Kernel not importable ({type(e).__name__}: {e}); its column stays empty")
        return {}


def cases():
    torch.manual_seed(0)
    bf16 = dict(device=DEVICE, dtype=torch.bfloat16)
    m, inter, s = TOKENS, INTER, TOKENS
    g, u = torch.randn(m, inter, **bf16), torch.randn(m, inter, **bf16)
    gu = torch.randn(m, 2 * inter, **bf16)
    q, k = torch.randn(1, 32, s, 128, **bf16), torch.randn(1, 8, s, 128, **bf16)
    pos = torch.arange(s, device=DEVICE).float()[:, None] / (10000 ** (torch.arange(0, 128, 2, device=DEVICE) / 128))
    emb = torch.cat((pos, pos), -1)[None]
    cos, sin = emb.cos().to(torch.bfloat16), emb.sin().to(torch.bfloat16)
    qs, ks = torch.randn(1, s, 32, 128, **bf16), torch.randn(1, s, 8, 128, **bf16)
    qw, kw = ((1 + 0.1 * torch.randn(128, device=DEVICE)).to(torch.bfloat16) for _ in range(2))
    mn = m * inter * 2
    qk = (32 + 8) * s * 128 * 2
    # name, spelling, inputs, the inputs that take a gradient, bytes fwd, bytes fwd+bwd, the Mojo op expected
    return [
        ("swiglu 16384x11008", swiglu, [g, u], [0, 1], 3 * mn, 7 * mn, "mojo.gated_act"),
        ("swiglu fused gate_up", swiglu_fused, [gu], [0], 3 * mn, 7 * mn, "mojo.gated_act_fused"),
        ("rope q32/k8 16384x128", rope, [q, k, cos, sin], [0, 1], 2 * qk, 4 * qk, "mojo.rope"),
        ("qwen3 qk-norm + rope", qwen3_qk_norm_rope, [qs, ks, qw, kw, cos, sin], [0, 1, 2, 3], 2 * qk, 5 * qk,
         "mojo.qk_norm_rope"),
    ]


def main():
    torch._dynamo.config.cache_size_limit = 64
    copy_bw = copy_bandwidth()
    print(f"{torch.cuda.get_device_name() if DEVICE == 'cuda' else DEVICE}  torch {torch.__version__}  "
          f"copy bandwidth {copy_bw / 1e12:.2f} TB/s")
    liger = liger_ops()
    rows_fwd, rows_train = [], []
    for name, fn, inputs, with_grad, fwd_bytes, train_bytes, op in cases():
        mojo_compile.reset_report()
        impls = {"eager": fn, "inductor": torch.compile(fn, dynamic=False),
                 "mojo": torch.compile(fn, backend="mojo", dynamic=False)}
        key = name.split()[0] + ("_fused" if "fused" in name else "")
        if key in liger:
            impls["liger"] = (lambda *a, f=liger[key]: f(*a)) if key != "rope" else \
                (lambda q, k, c, s, f=liger[key]: f(q, k, c, s))
        fwd, train, errs = {}, {}, {}
        ref = fn(*[t.double() for t in inputs])
        ref = ref if isinstance(ref, tuple) else (ref,)
        for impl_name, impl in impls.items():
            out = impl(*inputs)
            out = out if isinstance(out, tuple) else (out,)
            errs[impl_name] = max(rel_err(o, r) for o, r in zip(out, ref))
            fwd[impl_name] = bench(lambda impl=impl: impl(*inputs))
            leaves = [t.detach().requires_grad_(i in with_grad) for i, t in enumerate(inputs)]
            wrt = [leaves[i] for i in with_grad]
            outs = impl(*leaves)
            outs = outs if isinstance(outs, tuple) else (outs,)
            grads = [torch.randn_like(o) for o in outs]

            def step(impl=impl, leaves=leaves, grads=grads, wrt=wrt):
                o = impl(*leaves)
                o = o if isinstance(o, tuple) else (o,)
                return torch.autograd.grad(o, wrt, grads)

            try:
                train[impl_name] = bench(step, cudagraph=False)
            except Exception as e:  # Liger's RoPE has no grad for some inputs: report, do not fail the table
                print(f"{name} {impl_name} fwd+bwd failed: {type(e).__name__}: {e}")
        assert mojo_compile.last_report().counts().get(op, 0) >= 1, (name, mojo_compile.last_report().counts())
        for rows, times, nbytes in ((rows_fwd, fwd, fwd_bytes), (rows_train, train, train_bytes)):
            gbs = nbytes / (times["mojo"] * 1e-6) / 1e9 if "mojo" in times else 0
            peers = [times[n] for n in ("inductor", "liger") if n in times]
            rows.append([name, *(fmt(times.get(n)) for n in ("eager", "inductor", "liger", "mojo")), f"{gbs:7.0f}",
                         f"{100 * gbs * 1e9 / copy_bw:5.1f}%",
                         f"{min(peers) / times['mojo']:5.2f}x" if "mojo" in times else "-",
                         f"{errs['mojo']:.1e} ({errs['eager']:.1e})"])
    header = ["op", "eager", "inductor", "liger", "mojo", "mojo GB/s", "% copy", "vs best peer",
              "mojo rel err (eager)"]
    print_table("forward (us, CUDA-graph replays)", header, rows_fwd)
    print_table("forward + backward (us, plain calls)", header, rows_train)


if __name__ == "__main__":
    main()
