"""RMSNorm and LayerNorm, alone and after a residual add, on the GPU: eager / Inductor / Liger / mojo, side by side.

    python benchmarks/bench_norms.py [--quick] [--tokens 1,128 --hidden 4096] [--ops layer_norm] [--profile mojo]

The RMSNorms run the HF Llama spelling (bf16, eps 1e-6); LayerNorm runs `F.layer_norm` with weight and bias (bf16,
eps 1e-5: the call nn.LayerNorm makes in GPT-NeoX, StableLM, StarCoder2 and Phi); the residual forms add first and
return the sum too. Eager is the spelling itself, Inductor is `torch.compile` of it, Liger is LigerRMSNormFunction /
LigerFusedAddRMSNormFunction (casting_mode="llama") / LigerLayerNormFunction (after torch's add: Liger has no residual
LayerNorm), mojo is `torch.compile(spelling, backend="mojo")` (the pattern found and replaced by the Mojo op, whose
Triton kernels the default inner compiler, Inductor, launches from its own code). Forward times are medians of
CUDA-graph replays (GPU time, no Python launch overhead for anyone); forward + backward times are medians of plain
calls (`torch.autograd.grad`), so launch overhead shows at small sizes. The backward's GPU time is the step's kernel
time less the forward's (torch.profiler sums, `common.kernel_time`): no launch overhead. All in microseconds. GB/s
counts the bytes an ideal kernel must move (each input read once, each output written once); % is of the measured
copy bandwidth.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (bench, copy_bandwidth, fmt, kernel_time, liger, print_kernel_table, print_table,  # noqa: E402
                    rel_err)

import mojo_compile  # noqa: E402

EPS = 1e-6


def llama_rms_norm(x, weight):
    input_dtype = x.dtype
    x = x.to(torch.float32)
    variance = x.pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(variance + EPS)
    return weight * x.to(input_dtype)


def add_llama_rms_norm(x, residual, weight):
    total = residual + x
    return llama_rms_norm(total, weight), total


LN_EPS = 1e-5


def layer_norm(x, weight, bias):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, LN_EPS)


def add_layer_norm(x, residual, weight, bias):
    total = residual + x
    return layer_norm(total, weight, bias), total


SPELLINGS = {"rms_norm": llama_rms_norm, "add_rms_norm": add_llama_rms_norm, "layer_norm": layer_norm,
             "add_layer_norm": add_layer_norm}


def implementations(op: str, peers):
    fn = SPELLINGS[op]
    impls = {
        "eager": fn,
        "inductor": torch.compile(fn, dynamic=False),
        "mojo": torch.compile(fn, backend="mojo", dynamic=False),  # Inductor inner: it launches the Mojo kernels
    }
    if peers is not None:
        rms, add_rms, ln = peers
        if op == "layer_norm":
            impls["liger"] = lambda x, w, b: ln.LigerLayerNormFunction.apply(x, w, b, LN_EPS)
        elif op == "add_layer_norm":  # Liger has no residual LayerNorm: torch's add, then its LayerNorm
            def liger_add_layer_norm(x, r, w, b):
                total = r + x
                return ln.LigerLayerNormFunction.apply(total, w, b, LN_EPS), total
            impls["liger"] = liger_add_layer_norm
        elif op == "rms_norm":
            impls["liger"] = lambda x, w: rms.LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False)
        else:
            impls["liger"] = lambda x, r, w: add_rms.LigerFusedAddRMSNormFunction.apply(x, r, w, EPS, 0.0, "llama",
                                                                                       False)
    return impls


def reference(op, inputs):
    """fp64 of the same spelling (roundings of the bf16 spelling kept where they are part of its definition)."""
    if op in ("layer_norm", "add_layer_norm"):
        total = inputs[1] + inputs[0] if op == "add_layer_norm" else inputs[0]  # the bf16 sum: the spelling's
        x, w, b = (t.double() for t in (total, *inputs[-2:]))
        centred = x - x.mean(-1, keepdim=True)
        return centred * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + LN_EPS) * w + b, x
    if op == "rms_norm":
        x, w = inputs
        x64 = x.double()
        return (w.double() * (x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + EPS))),
    x, r, w = inputs
    total = (r + x).double()
    return (w.double() * (total * torch.rsqrt(total.pow(2).mean(-1, keepdim=True) + EPS))), total


def run(op: str, tokens_list, hidden_list, peers, copy_bw, profile=()):
    impls = implementations(op, peers)
    names = list(impls)
    rows_fwd, rows_train, rows_bwd = [], [], []
    residual = op.startswith("add_")
    fwd_bytes = 4 if residual else 2  # tensors of [M, N] moved
    train_bytes = 8 if residual else 5
    for hidden in hidden_list:
        for tokens in tokens_list:
            torch.manual_seed(0)
            x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
            w = (1 + 0.1 * torch.randn(hidden, device="cuda")).to(torch.bfloat16)
            bias = (0.1 * torch.randn(hidden, device="cuda")).to(torch.bfloat16)
            if op in ("layer_norm", "add_layer_norm"):
                inputs = [x, torch.randn_like(x), w, bias] if residual else [x, w, bias]
            else:
                inputs = [x, w] if op == "rms_norm" else [x, torch.randn_like(x), w]
            ref = reference(op, inputs)
            fwd, train, bwd, errs = {}, {}, {}, {}
            for name, impl in impls.items():
                out = impl(*inputs)
                out = out if isinstance(out, tuple) else (out,)
                errs[name] = rel_err(out[0], ref[0])
                fwd[name] = bench(lambda: impl(*inputs))
                leaves = [t.detach().requires_grad_() for t in inputs]
                outs = impl(*leaves)
                outs = outs if isinstance(outs, tuple) else (outs,)
                grads = [torch.randn_like(o) for o in outs]

                def step(impl=impl, leaves=leaves, grads=grads):
                    o = impl(*leaves)
                    o = o if isinstance(o, tuple) else (o,)
                    return torch.autograd.grad(o, leaves, grads)

                train[name] = bench(step, cudagraph=False)  # autograd does not capture reliably
                step_gpu = kernel_time(step)
                if name in profile:
                    print_kernel_table(f"{op} {tokens}x{hidden} {name}: forward + backward", step, steps=5)
                bwd[name] = step_gpu - kernel_time(lambda impl=impl, leaves=leaves: impl(*leaves))
            assert errs["mojo"] <= 2 * errs["eager"] + 1e-3, (op, tokens, hidden, errs)
            m = tokens * hidden * 2
            bwd_bytes = train_bytes - fwd_bytes
            for rows, times, nbytes in ((rows_fwd, fwd, fwd_bytes * m), (rows_train, train, train_bytes * m),
                                        (rows_bwd, bwd, bwd_bytes * m)):
                gbs = nbytes / (times["mojo"] * 1e-6) / 1e9
                best_peer = min(times[n] for n in names if n not in ("mojo", "eager"))
                rows.append([f"{tokens}x{hidden}", *(fmt(times.get(n)) for n in ("eager", "inductor", "liger", "mojo")),
                             f"{gbs:7.0f}", f"{100 * gbs * 1e9 / copy_bw:5.1f}%",
                             f"{best_peer / times['mojo']:5.2f}x", f"{errs['mojo']:.1e}"])
    header = ["tokens x hidden", "eager", "inductor", "liger", "mojo", "mojo GB/s", "% copy", "vs best peer",
              "mojo rel err"]
    print_table(f"{op} forward (us)", header, rows_fwd)
    print_table(f"{op} forward + backward (us, plain calls)", header, rows_train)
    print_table(f"{op} backward (us, GPU kernel time)", header, rows_bwd)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="only the large shapes")
    parser.add_argument("--tokens", help="comma-separated token counts (default 1,128,4096,16384)")
    parser.add_argument("--hidden", help="comma-separated hidden sizes (default 2048,4096,8192)")
    parser.add_argument("--ops", default="rms_norm,add_rms_norm,layer_norm,add_layer_norm", help="comma-separated ops")
    parser.add_argument("--profile", default="", help="comma-separated impls whose forward + backward kernels to list")
    args = parser.parse_args()
    torch._dynamo.config.cache_size_limit = 64
    copy_bw = copy_bandwidth()
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  copy bandwidth {copy_bw / 1e12:.2f} TB/s")
    tokens = [4096, 16384] if args.quick else [1, 128, 4096, 16384]
    hidden = [4096] if args.quick else [2048, 4096, 8192]
    tokens = [int(t) for t in args.tokens.split(",")] if args.tokens else tokens
    hidden = [int(h) for h in args.hidden.split(",")] if args.hidden else hidden
    peers = liger()
    for op in args.ops.split(","):
        mojo_compile.reset_report()
        run(op, tokens, hidden, peers, copy_bw, args.profile.split(",") if args.profile else ())
        counts = mojo_compile.last_report().counts()
        assert counts.get(f"mojo.{op}", 0) >= 1, f"mojo did not fuse {op}: {mojo_compile.last_report()}"


if __name__ == "__main__":
    main()
