"""A training step of an HF causal LM (forward with `labels=`, loss.backward()): eager / Inductor / Liger / mojo, side
by side -- time, peak memory, agreement with eager (and fp64), and the GEMM + attention floor.

The H200 runs (issue 14):

    python benchmarks/bench_train.py --model llama3-dims   --impls eager,inductor,liger,mojo,mojo-model
    python benchmarks/bench_train.py --model qwen3-8b-dims --impls eager,inductor,liger,mojo,mojo-model

each also with `--grads fresh`, and `--profile mojo,liger` for where each step's time goes (with `--profile-trace DIR`
the timelines too, whose launch gaps `benchmarks/trace_gaps.py DIR/mojo_trace.json.gz` charges to host ops); Liger
comes from a wheel carried to the machine (it has no network). (defaults: --layers 4, --batch 1, --seq 4096,
--steps 20, --warmup 3, --tflops 705, the H200's bf16 GEMM 8192^3 from docs/performance-anchors.md; `--tflops measure`
times that GEMM instead). The CPU smoke test:

    python benchmarks/bench_train.py --tiny --impls eager,mojo [--check-fp64]

Models, from transformers configs, random weights, bf16, SDPA attention (`--attn eager` for HF's eager attention):
  llama3-dims    Llama-3.1-8B dims: hidden 4096, intermediate 14336, 32 / 8 heads, head_dim 128, vocab 128256,
                 rope llama3 (theta 5e5, factor 8), rms eps 1e-5, untied head
  qwen3-8b-dims  Qwen3-8B dims: hidden 4096, intermediate 12288, 32 / 8 heads, head_dim 128, vocab 151936, qk-norm,
                 rope theta 1e6, rms eps 1e-6, untied head
  --tiny         the chosen family at hidden 64, intermediate 128, 4 / 2 heads, head_dim 16, vocab 517, 2 layers,
                 seq 32: runs on the CPU (times by time.perf_counter, memory "n/a")
Implementations, each a fresh model with the same weights (copied from the first one built):
  eager      the HF model as it is
  inductor   torch.compile of the loss function (input_ids, labels) -> model(input_ids=, labels=).loss
  mojo       the same with backend="mojo": the logits are no graph output, so the LM head fuses with the loss
             (mojo.linear_cross_entropy: the logits never materialised whole)
  mojo-model torch.compile(model, backend="mojo"): the model returns its logits, so they are materialised and the
             loss fuses on them (mojo.cross_entropy)
  liger      liger_kernel's apply_liger_kernel_to_llama / _qwen3 (RMSNorm, RoPE, SwiGLU, fused linear
             cross-entropy) on an eager model; "not installed" when liger_kernel does not import. Liger patches the HF
             modules globally, so it always runs last, whatever the order in --impls.
The step: model(input_ids=ids, labels=ids).loss.backward(), ids random in [3, vocab). The first step (the compile,
timed as "compile s") gives the loss and the gradients compared: loss rel diff = |loss - loss_eager| / |loss_eager|,
grad-norm rel diff the same of the global gradient norm, grad rel err = ||g - g_eager|| / ||g_eager|| over all
parameters; with --check-fp64 the same against an fp64 copy of the model (eager's row then shows what bf16 itself
costs). The fp64 model takes 4x the bf16 model's weights and grads plus fp64 activations: meant for small models
(--tiny, fewer layers or tokens); whether the 4-layer 4096-token ones fit an H200 is untested.
Then --warmup steps and --steps timed steps. --grads accumulate (the default): gradients accumulate (never
zeroed), so weights and grads stay resident, and each step's new gradients are added into them -- eager adds each
as autograd makes it, a compiled backward returns them all at its end, so they are all alive there (the parameters'
size again). --grads fresh: zero_grad(set_to_none=True) before each step (optimizer.zero_grad()'s default): the
new gradients become .grad, nothing is added. Time: the median over the timed steps, each between two CUDA events (host launch gaps included, as in a
training loop). Peak: torch.cuda.max_memory_allocated over warmup + timed steps, absolute and minus the weights +
grads (2 x the parameter bytes: the activations and temporaries).
Floor: 3 x the forward GEMM FLOPs (q/k/v/o, gate/up/down, lm_head; 2 per multiply-add) at --tflops plus the causal
attention's forward + backward FLOPs (3.5 x 2 * 2 * B * Hq * S^2 * D / 2 per layer, as bench_attention.py counts
them) at --attn-tflops (default: --tflops); % of floor = floor / time. Norms, RoPE, SwiGLU, the loss and the
embedding are memory-bound and not in the floor.
Output: a markdown table (one row per impl) headed with the date, device and versions, ready for BENCHMARKS.md;
--json OUT writes the same and every step's time as JSON.
"""
from __future__ import annotations

import argparse
import datetime
import gzip
import json
import math
import os
import platform
import shutil
import sys
import time
import traceback
from typing import Optional

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (LLAMA3_8B_DIMS, QWEN3_8B_DIMS, TINY_DIMS, bench, cleanup, median, print_table,  # noqa: E402
                    sync)
from common import versions as common_versions  # noqa: E402

import mojo_compile  # noqa: E402

H200_BF16_TFLOPS = 705.0  # bf16 GEMM 8192^3 on the lent H200 (docs/performance-anchors.md)
ORDER = ("eager", "inductor", "mojo", "mojo-model", "liger")  # the run order: Liger last (it patches HF globally)

MODELS = {"llama3-dims": ("llama", LLAMA3_8B_DIMS), "qwen3-8b-dims": ("qwen3", QWEN3_8B_DIMS)}
TINY = TINY_DIMS


# ----------------------------------------------------------------------------------------------- the model
def make_config(args):
    import transformers

    family, dims = MODELS[args.model]
    dims = dict(dims, **(TINY if args.tiny else {}), num_hidden_layers=args.layers, tie_word_embeddings=False,
                pad_token_id=0, bos_token_id=1, eos_token_id=2, attention_dropout=0.0)
    cls = {"llama": transformers.LlamaConfig, "qwen3": transformers.Qwen3Config}[family]
    return family, cls(**dims)


def build(config, args, dtype, weights=None):
    """A fresh model of `config` on the device in `dtype`, in training mode; `weights` (a CPU state dict) copied in."""
    import transformers

    torch.manual_seed(args.seed)
    with torch.device(args.device):  # initialised on the device: seconds, not a minute per model
        # built in `dtype` (as from_pretrained(dtype=...) does): the rotary inv_freq stays fp32
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=args.attn, dtype=dtype)
    if weights is not None:
        model.load_state_dict(weights)
    return model.train()


def floor(config, args):
    """The floor's parts: forward GEMM FLOPs (x3 for fwd + bwd) and causal attention fwd + bwd FLOPs."""
    h, hd, nq, nkv = config.hidden_size, config.head_dim, config.num_attention_heads, config.num_key_value_heads
    tokens = args.batch * args.seq
    per_layer = 2 * (h * nq * hd + 2 * h * nkv * hd + nq * hd * h + 3 * h * config.intermediate_size)
    gemm_fwd = tokens * (config.num_hidden_layers * per_layer + 2 * h * config.vocab_size)
    attn_fwd = config.num_hidden_layers * 2 * 2 * args.batch * nq * args.seq * args.seq * hd / 2
    gemm_ms = 3 * gemm_fwd / (args.tflops * 1e12) * 1e3
    attn_ms = 3.5 * attn_fwd / (args.attn_tflops * 1e12) * 1e3
    return dict(gemm_fwd_tflop=gemm_fwd / 1e12, attn_fwd_bwd_tflop=3.5 * attn_fwd / 1e12, tflops=args.tflops,
                attn_tflops=args.attn_tflops, gemm_ms=gemm_ms, attn_ms=attn_ms, ms=gemm_ms + attn_ms)


def measure_tflops(device):
    """bf16 GEMM throughput: 8192^3 by triton.testing.do_bench on CUDA, 1024^3 by perf_counter on the CPU."""
    if device == "cuda":
        n = 8192
        a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        us = bench(lambda: a @ b, cudagraph=False)
        return 2 * n ** 3 / (us * 1e-6) / 1e12
    n = 1024
    a, b = (torch.randn(n, n, dtype=torch.bfloat16) for _ in range(2))
    ts = []
    for _ in range(5):
        t = time.perf_counter()
        a @ b
        ts.append(time.perf_counter() - t)
    return 2 * n ** 3 / median(ts) / 1e12


# ----------------------------------------------------------------------------------------------- implementations
def liger_patch(family):
    """The Liger patch for the family, or the reason there is none."""
    try:
        from liger_kernel.transformers import apply_liger_kernel_to_llama, apply_liger_kernel_to_qwen3
    except Exception as e:
        return None, f"not installed ({type(e).__name__})"
    return {"llama": apply_liger_kernel_to_llama, "qwen3": apply_liger_kernel_to_qwen3}[family], None


def wrap(name, model, family):
    """The callable (input_ids, labels) -> loss that runs `model` as implementation `name`."""
    def loss_of(input_ids, labels):
        return model(input_ids=input_ids, labels=labels).loss

    if name == "inductor":
        return torch.compile(loss_of)
    if name == "mojo":  # the loss function compiled: the logits are no graph output, the LM head fuses with the loss
        mojo_compile.reset_report()
        return torch.compile(loss_of, backend="mojo")
    if name == "mojo-model":  # the model compiled: it returns the logits, so the loss fuses on them, materialised
        mojo_compile.reset_report()
        compiled = torch.compile(model, backend="mojo")
        return lambda input_ids, labels: compiled(input_ids=input_ids, labels=labels).loss
    if name == "liger":
        patch, why = liger_patch(family)
        if patch is None:
            raise RuntimeError(why)
        patch(rope=True, rms_norm=True, swiglu=True, cross_entropy=False, fused_linear_cross_entropy=True,
              model=model)
    return loss_of


def grads_of(model):
    return {n: p.grad for n, p in model.named_parameters() if p.requires_grad}


def host_copy(grads, dtype=None):
    """A copy on the CPU (a copy on the CPU too: the model's gradients accumulate in place afterwards)."""
    return {n: gr.detach().to("cpu", dtype=dtype, copy=True) for n, gr in grads.items() if gr is not None}


def global_norm(grads):
    return math.sqrt(sum(torch.linalg.vector_norm(g.float()).item() ** 2 for g in grads.values() if g is not None))


def grad_rel_err(grads, ref):
    """||g - g_ref|| / ||g_ref|| over all parameters (fp32 on the device, one parameter at a time)."""
    num = den = 0.0
    for name, r in ref.items():
        g = grads.get(name)
        if g is None:
            return float("nan")
        r = r.to(device=g.device, dtype=torch.float32)
        num += torch.linalg.vector_norm(g.float() - r).item() ** 2
        den += torch.linalg.vector_norm(r).item() ** 2
    return math.sqrt(num / max(den, 1e-300))


def rel(x, ref):
    return abs(x - ref) / max(abs(ref), 1e-300)


def run_impl(name, config, family, args, weights, ids, timed=True):
    """Build, compile (first step), record the agreement values, then time. Returns the result dict and the first
    step's gradients on the CPU (for the references)."""
    device = args.device
    res = dict(impl=name)
    if device == "cuda":
        res["resident_before_gib"] = torch.cuda.memory_allocated() / 2 ** 30
    model = build(config, args, torch.bfloat16, weights)
    params = [p for p in model.parameters() if p.requires_grad]
    wg_bytes = 2 * sum(p.numel() * p.element_size() for p in params)
    runner = wrap(name, model, family)

    def step():
        if args.grads == "fresh":
            model.zero_grad(set_to_none=True)
        with torch._dynamo.config.patch(compiled_autograd=args.compiled_autograd and name not in ("eager", "liger")):
            loss = runner(ids, ids)
            loss.backward()
        return loss.detach()

    sync(device)
    t = time.perf_counter()
    loss = step()
    sync(device)
    res["compile_s"] = time.perf_counter() - t
    res["loss"] = loss.double().item()
    grads = grads_of(model)
    res["grad_norm"] = global_norm(grads)
    res["missing_grads"] = sorted(n for n, g in grads.items() if g is None)
    if name.startswith("mojo"):
        report = mojo_compile.last_report()
        res["mojo_graphs"] = len(report.graphs)
        res["mojo_fused"] = dict(sorted(report.counts().items()))
    yield res, grads  # the caller compares the first step's gradients before they accumulate
    del grads  # with --grads fresh, these references would keep the first step's gradients alive
    if not timed:
        return

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for _ in range(args.warmup):
        step()
    times = []
    if device == "cuda":
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(args.steps)]
        for start, end in events:
            start.record()
            step()
            end.record()
        torch.cuda.synchronize()
        times = [start.elapsed_time(end) for start, end in events]
        peak = torch.cuda.max_memory_allocated()
        res["peak_gib"] = peak / 2 ** 30
        res["peak_over_weights_grads_gib"] = (peak - wg_bytes) / 2 ** 30
    else:
        for _ in range(args.steps):
            t = time.perf_counter()
            step()
            times.append((time.perf_counter() - t) * 1e3)
    res["weights_grads_gib"] = wg_bytes / 2 ** 30
    res["times_ms"] = times
    res["ms"] = median(times)
    if name in args.profile and device == "cuda":
        trace = os.path.join(args.profile_trace, f"{name}_trace.json.gz") if args.profile_trace else None
        res["profile_ms"] = profile_step(step, res["ms"], trace=trace)
        print_profile(name, res["profile_ms"], res["ms"])


# Kernel kinds by name, first match wins (profile_step). The AccumulateGrad and embedding-backward rows are the GPU
# time under those autograd / aten calls, whatever their kernels are named.
KERNEL_KINDS = (
    ("attention (cuDNN / flash)", ("cudnn", "flash", "fmha")),
    ("GEMMs (cuBLAS / CUTLASS)", ("nvjet", "gemm", "cutlass", "xmma", "sm90_", "cublas")),
    ("collectives (NCCL)", ("nccl",)),
    ("copies and fills", ("memcpy", "memset")),
    ("PyTorch's own kernels (ATen)", ("at::", "void ")),
)
# The kinds whose heaviest kernels the profile names: each lumps many unrelated ops together.
NAMED_KINDS = ("Triton kernels (Inductor's triton_*, mojo's)", "PyTorch's own kernels (ATen)", "other kernels")
NAMED_PER_KIND = 6
CALL_ROWS = (("param.grad += new (AccumulateGrad)", "torch::autograd::AccumulateGrad"),
             ("embedding backward", "aten::embedding_dense_backward"))


def kernel_kind(name: str) -> str:
    """A kind of KERNEL_KINDS; a bare identifier (a Triton kernel is named after its function: Inductor's
    triton_*, mojo's kernels) is Triton's; the rest "other kernels"."""
    low = name.lower()
    kind = next((kind for kind, keys in KERNEL_KINDS if any(k in low for k in keys)), None)
    if kind is None and name.isidentifier():
        kind = "Triton kernels (Inductor's triton_*, mojo's)"
    return kind or "other kernels"


def short_kernel_name(name: str, width: int = 66) -> str:
    """A kernel's name cut to `width`, without the namespaces that make ATen's templated names all begin alike."""
    for noise in ("void ", "at::native::", "(anonymous namespace)::", "at::cuda::", "c10::"):
        name = name.replace(noise, "")
    return name[:width]


def profile_step(step, step_ms: float, steps: int = 3, trace: Optional[str] = None) -> dict:
    """torch.profiler over `steps` steps: ms per step of GPU kernels by kind (kernel_kind), of the calls in
    CALL_ROWS (their kernels are also counted in their kinds), the heaviest kernels by name of the kinds that
    lump many ops together (NAMED_KINDS), and the step's time outside kernels (step_ms less the kernels' sum:
    launch gaps and host work the GPU waits on)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    if trace:  # the whole timeline (chrome://tracing, Perfetto), gzipped: the launch gaps are read from it
        os.makedirs(os.path.dirname(trace) or ".", exist_ok=True)
        raw = trace[:-len(".gz")]
        prof.export_chrome_trace(raw)
        with open(raw, "rb") as src, gzip.open(trace, "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.remove(raw)
    averages = prof.key_averages()
    kinds, named = {}, {}
    for e in averages:
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        ms = e.device_time_total / 1e3 / steps
        kind = kernel_kind(e.key)
        kinds[kind] = kinds.get(kind, 0.0) + ms
        if kind in NAMED_KINDS:
            named.setdefault(kind, {})[e.key] = ms
    out = {}
    for kind, ms in sorted(kinds.items(), key=lambda kv: -kv[1]):
        out[kind] = ms
        for key, key_ms in sorted(named.get(kind, {}).items(), key=lambda kv: -kv[1])[:NAMED_PER_KIND]:
            out[f"    {short_kernel_name(key)}"] = key_ms
    total = sum(kinds.values())
    for row, call in CALL_ROWS:
        out[row] = sum(e.device_time_total for e in averages if e.key == call) / 1e3 / steps
    out["all kernels"] = total
    out["outside kernels (step less kernels)"] = step_ms - total
    return out


def print_profile(name: str, rows: dict, step_ms: float) -> None:
    print(f"\n{name}: where a {step_ms:.2f} ms step goes (torch.profiler, GPU ms per step)")
    for row, ms in rows.items():
        print(f"  {row:<70} {ms:8.2f}")


def reference(kind, config, family, args, weights, ids):
    """(loss, grad norm, gradients on the CPU) of one step of the eager model in bf16 (kind "eager") or of an fp64
    copy (kind "fp64")."""
    if kind == "fp64":
        model = build(config, args, torch.float64, {k: v.double() for k, v in weights.items()})
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        grads = grads_of(model)
        out = loss.item(), global_norm(grads), host_copy(grads, torch.float32)
        del model, loss, grads
        cleanup(args.device)
        return out
    gen = run_impl("eager", config, family, args, weights, ids, timed=False)
    res, grads = next(gen)
    out = res["loss"], res["grad_norm"], host_copy(grads)
    del gen, res, grads
    cleanup(args.device)
    return out


# ----------------------------------------------------------------------------------------------- output
def versions():
    return common_versions({"triton": "triton", "transformers": "transformers", "liger-kernel": "Liger Kernel"})


def device_name(device):
    if device == "cuda":
        return torch.cuda.get_device_name()
    return f"CPU {platform.machine()} ({torch.get_num_threads()} threads)"


def g(x, spec):
    return "" if x is None else format(x, spec)


def floor_line(fl):
    return (f"floor {fl['ms']:.4g} ms = 3 x {fl['gemm_fwd_tflop']:.4g} TFLOP of GEMMs at {fl['tflops']:.4g} TFLOP/s "
            f"({fl['gemm_ms']:.4g} ms) + {fl['attn_fwd_bwd_tflop']:.4g} TFLOP of causal attention fwd + bwd at "
            f"{fl['attn_tflops']:.4g} TFLOP/s ({fl['attn_ms']:.4g} ms)")


def table(results, fl, args, title):
    header = ["impl", "ms", "% of floor", "peak GiB", "peak - weights+grads GiB", "loss rel diff",
              "grad-norm rel diff", "grad rel err"]
    if args.check_fp64:
        header += ["loss vs fp64", "grad-norm vs fp64", "grad vs fp64"]
    header += ["compile s"]
    rows = []
    for r in results:
        if "error" in r:
            rows.append([r["impl"], r["error"]] + [""] * (len(header) - 2))
            continue
        mem = ("n/a", "n/a") if args.device != "cuda" else (g(r.get("peak_gib"), ".2f"),
                                                            g(r.get("peak_over_weights_grads_gib"), ".2f"))
        row = [r["impl"], f"{r['ms']:.2f}", f"{100 * fl['ms'] / r['ms']:.3g}%", *mem,
               g(r.get("loss_rel_diff"), ".1e"), g(r.get("grad_norm_rel_diff"), ".1e"), g(r.get("grad_rel_err"), ".1e")]
        if args.check_fp64:
            row += [g(r.get("loss_rel_diff_fp64"), ".1e"), g(r.get("grad_norm_rel_diff_fp64"), ".1e"),
                    g(r.get("grad_rel_err_fp64"), ".1e")]
        rows.append(row + [f"{r['compile_s']:.1f}"])
    print_table(title, header, rows)


# ----------------------------------------------------------------------------------------------- main
def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", choices=sorted(MODELS), default="llama3-dims")
    p.add_argument("--tiny", action="store_true", help="hidden 64, vocab 517, 2 layers, seq 32 (runs on the CPU)")
    p.add_argument("--impls", default="eager,inductor,liger,mojo", help="comma-separated subset of " + ",".join(ORDER))
    p.add_argument("--layers", type=int, help="decoder layers (default 4; 2 with --tiny)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, help="tokens per sequence (default 4096; 32 with --tiny)")
    p.add_argument("--steps", type=int, default=20, help="timed steps (the median is reported)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps after the first (compiling) one")
    p.add_argument("--tflops", default=str(H200_BF16_TFLOPS),
                   help="matmul throughput of the floor in TFLOP/s, or 'measure' (default 705: the H200)")
    p.add_argument("--attn-tflops", type=float, help="attention throughput of the floor (default: --tflops)")
    p.add_argument("--check-fp64", action="store_true", help="also compare against an fp64 copy of the model")
    p.add_argument("--compiled-autograd", action="store_true",
                   help="the compiled impls' backward through compiled autograd (torch._dynamo.config.compiled_autograd)")
    p.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"], help="HF attn_implementation")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--grads", choices=["accumulate", "fresh"], default="accumulate",
                   help="accumulate: gradients add into .grad every step (never zeroed); fresh: "
                        "zero_grad(set_to_none=True) before each step, as optimizer.zero_grad() does")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", default="", metavar="IMPLS",
                   help="comma-separated impls whose step to profile after the timed steps (CUDA): GPU time by kind "
                        "of kernel, and the step's time outside kernels")
    p.add_argument("--profile-trace", metavar="DIR",
                   help="with --profile: also write each profiled impl's timeline to DIR/<impl>_trace.json.gz")
    p.add_argument("--lce-chunk-mb", type=float, metavar="MB",
                   help="an experiment: mojo's fused head + loss with chunks of this many MiB of logits "
                        "(ops/linear_cross_entropy.py's LCE_CHUNK_BYTES; the row of the table says so)")
    p.add_argument("--json", metavar="OUT", help="write the results as JSON to OUT")
    args = p.parse_args()
    args.layers = args.layers or (2 if args.tiny else 4)
    args.seq = args.seq or (32 if args.tiny else 4096)
    impls = [s.strip() for s in args.impls.split(",") if s.strip()]
    unknown = [s for s in impls if s not in ORDER]
    if unknown:
        p.error(f"unknown impls {unknown}; choose from {','.join(ORDER)}")
    args.impls = impls
    args.profile = [s.strip() for s in args.profile.split(",") if s.strip()]
    if args.device == "cpu" and not args.tiny:
        p.error("the full-size models need CUDA; on the CPU use --tiny")
    args.tflops = measure_tflops(args.device) if args.tflops == "measure" else float(args.tflops)
    args.attn_tflops = args.attn_tflops or args.tflops
    return args


def main():
    args = parse()
    if args.lce_chunk_mb:
        from mojo_compile.ops import linear_cross_entropy as lce
        lce.LCE_CHUNK_BYTES = int(args.lce_chunk_mb * 2 ** 20)
        print(f"experiment: LCE_CHUNK_BYTES = {lce.LCE_CHUNK_BYTES >> 20} MiB")
    family, config = make_config(args)
    fl = floor(config, args)
    date = datetime.date.today().isoformat()
    dev, vers = device_name(args.device), versions()
    shape = f"{args.layers} layers, {args.batch}x{args.seq} tokens" + (", tiny" if args.tiny else "")
    print(f"{date}  {dev}  " + ", ".join(f"{k} {v}" for k, v in vers.items()))
    print(floor_line(fl))

    torch.manual_seed(args.seed)
    ids = torch.randint(3, config.vocab_size, (args.batch, args.seq), device=args.device)
    first = build(config, args, torch.bfloat16)  # the weights every implementation gets
    weights = {k: v.detach().to("cpu", copy=True) for k, v in first.state_dict().items()}
    del first
    cleanup(args.device)

    refs = {}
    if args.check_fp64:
        refs["fp64"] = reference("fp64", config, family, args, weights, ids)
    if "eager" not in args.impls:
        refs["eager"] = reference("eager", config, family, args, weights, ids)

    results = {}
    grads = None
    for name in [n for n in ORDER if n in args.impls]:
        res = dict(impl=name)
        try:
            if name == "liger":
                _, why = liger_patch(family)
                if why:
                    raise RuntimeError(why)
                if args.device != "cuda":
                    raise RuntimeError("needs CUDA")
            gen = run_impl(name, config, family, args, weights, ids)
            res, grads = next(gen)
            if name == "eager":
                refs["eager"] = res["loss"], res["grad_norm"], host_copy(grads)
            for key, suffix in (("eager", ""), ("fp64", "_fp64")):
                if key in refs:
                    loss, gnorm, ref_grads = refs[key]
                    res["loss_rel_diff" + suffix] = rel(res["loss"], loss)
                    res["grad_norm_rel_diff" + suffix] = rel(res["grad_norm"], gnorm)
                    res["grad_rel_err" + suffix] = grad_rel_err(grads, ref_grads)
            del grads
            for _ in gen:  # warmup and timed steps
                pass
            if "mojo_fused" in res:
                fused = ", ".join(f"{op} x{n}" for op, n in res["mojo_fused"].items()) or "nothing fused"
                print(f"mojo: {res['mojo_graphs']} graph(s): {fused}")
        except Exception as e:
            if not str(e).startswith(("not installed", "needs CUDA")):
                traceback.print_exc()
            res["error"] = str(e) if str(e).startswith(("not installed", "needs CUDA")) else \
                f"failed: {type(e).__name__}: {str(e)[:80]}"
        finally:
            gen = grads = None
            cleanup(args.device)
        if res.get("resident_before_gib", 0) > 0.25:
            print(f"note: {res['resident_before_gib']:.2f} GiB still allocated before {name} was built "
                  "(counted in its absolute peak)")
        results[name] = res
    ordered = [results[n] for n in args.impls]

    cmd = "python benchmarks/bench_train.py " + " ".join(sys.argv[1:])
    title = (f"### Train step: {args.model} {shape} (`{cmd}`, ms) -- {date}, {dev} ("
             + ", ".join(f"{k} {v}" for k, v in vers.items()) + ")")
    table(ordered, fl, args, title)
    print(f"\n{floor_line(fl)}; times: median of {args.steps} steps after {args.warmup} warmup; rel diffs: the "
          "first step's, against eager" + (" and an fp64 copy" if args.check_fp64 else ""))
    if args.json:
        out = dict(date=date, device=dev, versions=vers, command=cmd, model=args.model, tiny=args.tiny,
                   layers=args.layers, batch=args.batch, seq=args.seq, steps=args.steps, warmup=args.warmup,
                   attn_implementation=args.attn, config=config.to_dict(), floor=fl, results=ordered,
                   references={k: dict(loss=v[0], grad_norm=v[1]) for k, v in refs.items()})
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
