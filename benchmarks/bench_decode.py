"""Serving speed (issue 15): the decode step of 4-layer LLMs of 8B dims, eager / Inductor / mojo, side by side.

    python benchmarks/bench_decode.py [--model llama,qwen3] [--parts step,generate] [--profile B,CTX] [--json OUT]
    python benchmarks/bench_decode.py --tiny [--impls eager,mojo]          (the CPU smoke test)

Models: 4 decoder layers, random weights, bf16, SDPA attention, built on the GPU.
  llama  Llama-3.1-8B dims: hidden 4096, intermediate 14336, 32 / 8 heads, head_dim 128, vocab 128256, rope llama3
         (theta 5e5, factor 8), rms eps 1e-5, untied head
  qwen3  Qwen3-8B dims: hidden 4096, intermediate 12288, 32 / 8 heads, head_dim 128, vocab 151936 (Qwen3-8B's own;
         bench_model.py uses 32000), qk-norm, rope theta 1e6, rms eps 1e-6, untied head
Implementations: eager (the HF model), inductor (torch.compile, default mode), mojo (torch.compile(backend="mojo")).

1. step: the model's forward of one new token per sequence against a StaticCache already holding `ctx` tokens
   (max_cache_len = ctx + 64), at --batch 1,64 x --ctx 512,4096,32768, timed as CUDA-graph replays
   (common.bench: triton.testing.do_bench_cudagraph, median) of the eager forward or of the compiled function
   (ids, positions, cache) -> logits. The cache is filled cheaply: random K/V written into its first ctx slots
   (no prefill). transformers 5.x's StaticLayer writes at its own device counter `cumulative_length` (it also gives
   the mask its query offset), which each step advances: the captured call therefore sets every layer's counter
   back to ctx first, and that reset, timed alone the same way (one 0-d fill per layer), is subtracted.
   One torch.compile per impl, default dynamic (None), over the grid in order: the first shape (B1, first ctx)
   gets a static graph, the next ctx a recompile with the cache length symbolic, the next batch one with the batch
   symbolic too (3 compiles; the floats such as eps stay constants -- with dynamic=True they become graph inputs and
   mojo's norm patterns refuse them); --static compiles every shape on its own (dynamic=False; slower to run).
   Floor = (bytes of every weight but the embedding table + the K/V of ctx tokens) / --bandwidth,
   4.25e12 B/s by default: the lent H200's measured device-to-device copy rate (common.copy_bandwidth; BENCHMARKS.md
   has 4.22-4.25 TB/s; the HBM3e spec is 4.8); `--bandwidth measure` measures it. % of floor = floor / time.
   HF's static-cache SDPA path attends over all max_cache_len slots with a mask, so eager and Inductor read
   ctx + 64 slots and materialise repeat_kv (GQA with a mask); the floor counts ctx. "rel err" is the compiled
   step's logits against eager's (same weights and cache). Shapes whose cache and temporaries would not fit the
   free GPU memory are skipped, with the reason printed.
2. generate: HF `generate` at batch 1 from a random 512-token prompt, greedy, cache_implementation="static",
   min_new_tokens = max_new_tokens = n; per token = (t(65 new) - t(1 new)) / 64, as bench_model.py's decode (its
   cache is 512 + 64 slots, the step's ctx-512 cache). Inductor and mojo through HF's CompileConfig (mode
   "reduce-overhead": CUDA graphs; mojo with backend="mojo"); eager with disable_compile=True. t(n) is the wall time
   (perf_counter, synchronised), median of --gen-reps calls. Host overhead = per-token time - the same impl's step
   time of part 1 at batch 1, ctx 512 (the GPU time of the forward): what the generate loop adds per token --
   Python, guards, launches, the graph replay's launch and the sampling's small eager kernels. "diverges at": the
   first generated token where the greedy token differs from eager's, or "none" (random bf16 weights have near-ties,
   so a flip late in the run is rounding, not a bug). --gen-runs N times it in N runs side by side: the impls
   interleaved (run 1 of each, then run 2, ...), each compiled once, its compiled call and cache kept between runs.
Each impl runs in try/except (a failure is printed and the run goes on); torch._dynamo.reset() and the GPU cache
are cleared between impls. --budget-s (default 225; none with --tiny) stops starting new work past that many s since the
start, printing what was skipped (the full default run is meant to fit in about 4 minutes on the H200).
--tiny: hidden 64, vocab 517, 2 layers, batch 1,2, ctx 16,48, on the CPU (perf_counter medians; the plumbing, not
timings; the floor there is meaningless).
"""
from __future__ import annotations

import argparse
import datetime
import gc
import inspect
import json
import os
import platform
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (LLAMA3_8B_DIMS, QWEN3_8B_DIMS, TINY_DIMS, bench, cleanup, median,  # noqa: E402
                    print_kernel_table, print_table, rel_err, sync, versions)

import mojo_compile  # noqa: E402

H200_COPY_BW = 4.25e12  # B/s: the lent H200's device-to-device copy (common.copy_bandwidth), BENCHMARKS.md
IMPLS = ("eager", "inductor", "mojo")
SLACK = 64  # max_cache_len = ctx + SLACK (generate: prompt + 65 new - 1)
NEW_TOKENS = 65

MODELS = {"llama": ("llama", LLAMA3_8B_DIMS), "qwen3": ("qwen3", QWEN3_8B_DIMS)}
TINY = TINY_DIMS


# ----------------------------------------------------------------------------------------------- model and cache
def make_config(name, tiny=False, layers=None):
    import transformers

    family, dims = MODELS[name]
    dims = dict(dims, **(TINY if tiny else {}), num_hidden_layers=layers or (2 if tiny else 4),
                tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2, attention_dropout=0.0)
    cls = {"llama": transformers.LlamaConfig, "qwen3": transformers.Qwen3Config}[family]
    return cls(**dims)


def build(config, device, seed=0):
    """The model in bf16 on `device` (initialised there: seconds, not a minute), eval mode, SDPA attention."""
    import transformers

    torch.manual_seed(seed)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa",
                                                              dtype=torch.bfloat16)
    return model.eval()


def cache_kwargs(model, cache, pos):
    """The cache argument under its name in this transformers (`cache` from 5.2x on, `past_key_values` before;
    both also take the other through a deprecation shim in some versions), plus cache_position where the forward
    still has it (transformers 4.x)."""
    params = inspect.signature(model.forward).parameters
    kw = {"cache" if "cache" in params else "past_key_values": cache}
    if "cache_position" in params:
        kw["cache_position"] = pos[0]
    return kw


def write_counters(cache):
    """The per-layer device counters a StaticLayer writes at (transformers 5.x: `cumulative_length`, a 0-d long
    tensor advanced by update()); empty where the layers write at cache_position only."""
    out = []
    for layer in cache.layers:
        c = getattr(layer, "cumulative_length", None)
        if isinstance(c, torch.Tensor):
            out.append(c)
    return out


def make_cache(config, batch, ctx, max_len, device, seed=0):
    """A StaticCache of max_len slots holding ctx tokens of random K/V, its counters set to ctx. The tensors are
    re-marked static without an id guard (HF's default guard differs between torch versions): a new cache of the
    same shapes then reuses the compiled graph."""
    from transformers import StaticCache

    cache = StaticCache(config=config, max_cache_len=max_len)
    cache.early_initialization(batch_size=batch, num_heads=config.num_key_value_heads, head_dim=config.head_dim,
                               dtype=torch.bfloat16, device=torch.device(device))
    gen = torch.Generator(device=device).manual_seed(seed)
    for layer in cache.layers:
        for t in (layer.keys, layer.values):
            t[:, :, :ctx].normal_(generator=gen)
            torch._dynamo.mark_static_address(t, guard=False)
    counters = write_counters(cache)
    for c in counters:
        torch._dynamo.mark_static_address(c, guard=False)
        c.fill_(ctx)
    return cache, counters


def weight_bytes(model):
    """Bytes of the weights a decode step reads whole: every parameter but the embedding table (B rows of it)."""
    emb = model.get_input_embeddings().weight
    return sum(p.numel() * p.element_size() for p in model.parameters() if p is not emb)


def kv_bytes(config, batch, tokens, elem=2):
    return 2 * config.num_hidden_layers * batch * config.num_key_value_heads * tokens * config.head_dim * elem


def step_fn(model):
    """(ids, positions, cache) -> logits of one decode step."""
    def fwd(ids, pos, cache):
        return model(input_ids=ids, position_ids=pos, use_cache=True, **cache_kwargs(model, cache, pos)).logits
    return fwd


def compiled(name, fn, dynamic):
    if name == "eager":
        return fn
    if name == "mojo":
        mojo_compile.reset_report()
        return torch.compile(fn, backend="mojo", dynamic=dynamic)
    return torch.compile(fn, dynamic=dynamic)


def mojo_line():
    try:
        report = mojo_compile.last_report()
        counts = {}
        for g in report.graphs:
            for op, n in g.counts().items():
                counts[op] = counts.get(op, 0) + n
        fused = ", ".join(f"{op} x{n}" for op, n in sorted(counts.items())) or "nothing fused"
        return f"{len(report.graphs)} graph(s): {fused}"
    except Exception as e:  # noqa: BLE001 - the report is informative only
        return f"no report ({type(e).__name__})"


# ----------------------------------------------------------------------------------------------- helpers
def time_us(fn, device, rep_ms, reps=5):
    """Median time of fn in us: CUDA-graph replays on the GPU (common.bench), perf_counter on the CPU."""
    if device == "cuda":
        return bench(fn, cudagraph=True, rep_ms=rep_ms)
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return median(ts) * 1e6


def first_call(fn, device):
    sync(device)
    t = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - t


class Budget:
    def __init__(self, seconds):
        self.start, self.seconds = time.perf_counter(), seconds
        self.skipped = []

    def over(self, what):
        spent = time.perf_counter() - self.start
        if self.seconds and spent > self.seconds:
            self.skipped.append(what)
            print(f"skipped {what}: {spent:.0f} s spent, over --budget-s {self.seconds:g}")
            return True
        return False


def fits(config, batch, max_len, device):
    """(fits, reason): the cache plus, for the attention, a repeat_kv'd copy of one layer's K and V twice over."""
    if device != "cuda":
        return True, ""
    rep = config.num_attention_heads // config.num_key_value_heads
    need = kv_bytes(config, batch, max_len) + 2 * rep * kv_bytes(config, batch, max_len) // config.num_hidden_layers
    need += 2 * batch * config.vocab_size * 4 + (1 << 30)
    free = torch.cuda.mem_get_info()[0]
    if need > 0.95 * free:
        return False, f"needs ~{need / 2 ** 30:.0f} GiB, {free / 2 ** 30:.0f} GiB free"
    return True, ""


# ----------------------------------------------------------------------------------------------- 1. the step
def bench_step(name, model, config, args, budget, eager_logits):
    """Rows of one impl over the (batch, ctx) grid."""
    device = args.device
    rows = []
    fn = compiled(name, step_fn(model), False if args.static else None)
    for batch in args.batch:
        for ctx in args.ctx:
            row = dict(model=args.family, impl=name, batch=batch, ctx=ctx, max_cache_len=ctx + args.slack)
            rows.append(row)
            ok, why = fits(config, batch, ctx + args.slack, device)
            if not ok:
                row["skipped"] = why
                print(f"{args.family} {name} B{batch} ctx{ctx}: skipped, {why}")
                continue
            if budget.over(f"step {args.family} {name} B{batch} ctx{ctx}"):
                row["skipped"] = "time budget"
                continue
            cache = counters = None
            try:
                if args.static and name != "eager":
                    torch._dynamo.reset()
                    fn = compiled(name, step_fn(model), False)
                cache, counters = make_cache(config, batch, ctx, ctx + args.slack, device, seed=args.seed)
                gen = torch.Generator(device=device).manual_seed(args.seed + batch)
                ids = torch.randint(3, config.vocab_size, (batch, 1), device=device, generator=gen)
                pos = torch.full((batch, 1), ctx, dtype=torch.long, device=device)

                def reset():
                    for c in counters:
                        c.fill_(ctx)

                def step():
                    reset()
                    return fn(ids, pos, cache)

                with torch.no_grad():
                    out, row["first_call_s"] = first_call(step, device)
                    key = (batch, ctx)
                    if name == "eager":
                        eager_logits[key] = out.detach().to("cpu", copy=True)
                    elif key in eager_logits:
                        row["rel_err"] = rel_err(out.float().cpu(), eager_logits[key].float())
                    del out
                    total = time_us(step, device, args.rep_ms)
                    if args.reset_us is None:  # the same 0-d fills whatever the shape: timed once per model
                        args.reset_us = time_us(reset, device, 20)
                    if args.profile and (batch, ctx) == tuple(args.profile) and device == "cuda":
                        print_kernel_table(f"{args.family} {name} B{batch} ctx{ctx}", step)
                row["reset_us"] = args.reset_us
                row["us"] = total - row["reset_us"]
                row["floor_us"] = (args.weight_bytes + kv_bytes(config, batch, ctx)) / args.bandwidth * 1e6
                row["pct_floor"] = 100 * row["floor_us"] / row["us"]
                print(f"{args.family} {name} B{batch} ctx{ctx}: {row['us']:.1f} us (first call "
                      f"{row['first_call_s']:.1f} s, reset {row['reset_us']:.1f} us)", flush=True)
            except Exception as e:
                traceback.print_exc()
                row["error"] = f"{type(e).__name__}: {str(e)[:100]}"
            finally:
                cache = counters = None
                gc.collect()
                if device == "cuda":
                    torch.cuda.empty_cache()
    if name == "mojo":
        print(f"mojo ({args.family}, step): {mojo_line()}")
    return rows


# ----------------------------------------------------------------------------------------------- 2. generate
GENERATE_STATE = ("_cache", "_compiled_call", "_last_compile_config")  # what HF keeps on the model between calls


def forget_generate_state(model, keep=None):
    """HF keeps the static cache and the compiled call on the model between generate calls: drop them between
    impls (the next impl builds its own), into `keep` (a dict) where given, for a later run of the same impl."""
    for attr in GENERATE_STATE:
        if hasattr(model, attr):
            if keep is not None:
                keep[attr] = getattr(model, attr)
            delattr(model, attr)


def bench_generate(name, model, config, args, eager_tokens, timed=True, state=None):
    """One impl's generate timing. state: a dict kept across --gen-runs for this impl: its compiled call, cache and
    CompileConfig, saved after its first run and put back for the next, so that each run after the first times
    the same compiled code without compiling again."""
    from transformers import CompileConfig

    device = args.device
    row = dict(model=args.family, impl=name, prompt=args.prompt, new_tokens=NEW_TOKENS)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    prompt = torch.randint(3, config.vocab_size, (1, args.prompt), device=device, generator=gen)
    kwargs = dict(do_sample=False, cache_implementation="static", pad_token_id=0)
    if name == "eager":
        kwargs["disable_compile"] = True
    else:
        cc = (state or {}).get("compile_config")  # HF compiles anew for a CompileConfig unequal to its last
        if cc is None:
            cc = CompileConfig(backend="mojo", mode="reduce-overhead") if name == "mojo" else CompileConfig()
            if device != "cuda":
                cc._compile_all_devices = True  # HF compiles on CUDA (and a few others) only unless told
        kwargs["compile_config"] = cc
        if state is not None:
            state["compile_config"] = cc
        if name == "mojo" and not (state or {}).get("_compiled_call"):
            mojo_compile.reset_report()

    def gen_n(n):
        return model.generate(prompt, max_new_tokens=n, min_new_tokens=n, **kwargs)

    def wall(n):
        ts = []
        for _ in range(args.gen_reps):
            sync(device)
            t = time.perf_counter()
            gen_n(n)
            sync(device)
            ts.append(time.perf_counter() - t)
        return median(ts)

    try:
        forget_generate_state(model)
        for attr in GENERATE_STATE:  # a later run: this impl's compiled call and cache, as its first run left them
            if attr in (state or {}):
                setattr(model, attr, state[attr])
        with torch.no_grad():
            out, row["first_call_s"] = first_call(lambda: gen_n(NEW_TOKENS), device)
            tokens = out[0, args.prompt:].tolist()
            row["tokens"] = tokens
            if name == "eager":
                eager_tokens[:] = tokens
            if eager_tokens:
                row["diverges_at"] = next((i for i, (a, b) in enumerate(zip(tokens, eager_tokens)) if a != b),
                                          "none")
            if not timed:
                return row
            gen_n(NEW_TOKENS)  # a second warm call (the CUDA-graph tree records on its first replays)
            t1, t65 = wall(1), wall(NEW_TOKENS)
        row["t1_ms"], row["t65_ms"] = t1 * 1e3, t65 * 1e3
        row["ms_per_token"] = (t65 - t1) / (NEW_TOKENS - 1) * 1e3
        print(f"{args.family} generate {name}: {row['ms_per_token']:.3f} ms/token (first call "
              f"{row['first_call_s']:.1f} s)", flush=True)
    except Exception as e:
        traceback.print_exc()
        row["error"] = f"{type(e).__name__}: {str(e)[:100]}"
    finally:
        forget_generate_state(model, keep=state)
    if name == "mojo":
        print(f"mojo ({args.family}, generate): {mojo_line()}")
    return row


def eager_reference_tokens(model, config, args):
    """Eager's greedy tokens, when eager is not among the timed impls."""
    tokens = []
    row = bench_generate("eager", model, config, args, tokens, timed=False)
    return tokens if "error" not in row else []


# ----------------------------------------------------------------------------------------------- output
def device_name(device):
    return torch.cuda.get_device_name() if device == "cuda" else \
        f"CPU {platform.machine()} ({torch.get_num_threads()} threads)"


def f1(x, spec=".1f"):
    return "-" if x is None else format(x, spec)


def step_table(rows, impls, title):
    by = {}
    for r in rows:
        by.setdefault((r["model"], r["batch"], r["ctx"]), {})[r["impl"]] = r
    header = ["model", "batch", "ctx", "floor us"] + [f"{n} us (% floor)" for n in impls]
    if "inductor" in impls and "mojo" in impls:
        header.append("Inductor / mojo")
    header += [f"{n} rel err" for n in impls if n != "eager"]
    out = []
    for (model, batch, ctx), d in by.items():
        floor = next((r["floor_us"] for r in d.values() if "floor_us" in r), None)
        line = [model, batch, ctx, f1(floor)]
        for n in impls:
            r = d.get(n, {})
            line.append(f"{r['us']:.1f} ({r['pct_floor']:.0f}%)" if "us" in r else
                        r.get("skipped") and "skipped" or ("failed" if "error" in r else "-"))
        if "inductor" in impls and "mojo" in impls:
            a, b = d.get("inductor", {}).get("us"), d.get("mojo", {}).get("us")
            line.append(f"{a / b:.2f}x" if a and b else "-")
        line += [f1(d.get(n, {}).get("rel_err"), ".1e") for n in impls if n != "eager"]
        out.append(line)
    print_table(title, header, out)


def generate_table(rows, title):
    header = ["model", "impl", "run", "ms / token", "step us (B1, ctx)", "host overhead ms / token", "overhead %",
              "diverges at", "first call s"]
    out = []
    for r in rows:
        if "error" in r or "skipped" in r:
            out.append([r["model"], r["impl"], r.get("run", 1), r.get("skipped") or "failed: " + r["error"][:60]]
                       + [""] * 5)
            continue
        step = r.get("step_us")
        over = r["ms_per_token"] - step / 1e3 if step is not None else None
        r["host_overhead_ms"] = over
        out.append([r["model"], r["impl"], r.get("run", 1), f"{r['ms_per_token']:.3f}",
                    f"{step:.1f} ({r['step_ctx']})" if step is not None else "-", f1(over, ".3f"),
                    f1(None if over is None else 100 * over / r["ms_per_token"], ".0f"),
                    str(r.get("diverges_at", "-")), f"{r['first_call_s']:.1f}"])
    print_table(title, header, out)


# ----------------------------------------------------------------------------------------------- main
def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="llama,qwen3", help="comma-separated subset of " + ",".join(MODELS))
    p.add_argument("--parts", default="step,generate", help="comma-separated subset of step,generate")
    p.add_argument("--impls", default=",".join(IMPLS), help="comma-separated subset of " + ",".join(IMPLS))
    p.add_argument("--batch", help="step batch sizes (default 1,64; 1,2 with --tiny)")
    p.add_argument("--ctx", help="step context lengths (default 512,4096,32768; 16,48 with --tiny)")
    p.add_argument("--layers", type=int, help="decoder layers (default 4; 2 with --tiny)")
    p.add_argument("--static", action="store_true", help="compile every step shape on its own (dynamic=False)")
    p.add_argument("--rep-ms", type=int, default=50, help="do_bench_cudagraph's rep per measurement")
    p.add_argument("--gen-reps", type=int, default=5, help="generate calls per timed length (median)")
    p.add_argument("--gen-runs", type=int, default=1,
                   help="generate timed in this many runs, the impls interleaved, each compiled once")
    p.add_argument("--bandwidth", default=str(H200_COPY_BW), help="floor bandwidth in B/s, or 'measure'")
    p.add_argument("--budget-s", type=float, help="start no new work after this many s (default 225; --tiny: no limit)")
    p.add_argument("--profile", type=lambda t: tuple(int(x) for x in t.split(",")), metavar="B,CTX",
                   help="also list the step's GPU kernels (torch.profiler) at this batch and context")
    p.add_argument("--tiny", action="store_true", help="tiny dims on the CPU: the plumbing, not timings")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="OUT", help="write the results as JSON to OUT")
    args = p.parse_args()
    if args.budget_s is None:
        args.budget_s = 0 if args.tiny else 225
    args.models = [m for m in args.model.split(",") if m]
    args.parts = [s for s in args.parts.split(",") if s]
    args.impls = [n for n in IMPLS if n in args.impls.split(",")]
    bad = [m for m in args.models if m not in MODELS] + [s for s in args.parts if s not in ("step", "generate")]
    if bad:
        p.error(f"unknown {bad}")
    args.batch = [int(x) for x in (args.batch or ("1,2" if args.tiny else "1,64")).split(",")]
    args.ctx = [int(x) for x in (args.ctx or ("16,48" if args.tiny else "512,4096,32768")).split(",")]
    args.slack = 16 if args.tiny else SLACK
    args.prompt = args.ctx[0]
    if args.device == "cpu" and not args.tiny:
        p.error("the full-size models need CUDA; on the CPU use --tiny")
    return args


def main():
    args = parse()
    budget = Budget(args.budget_s)
    date, dev, vers = datetime.date.today().isoformat(), device_name(args.device), versions()
    print(f"{date}  {dev}  " + ", ".join(f"{k} {v}" for k, v in vers.items()))
    if args.bandwidth == "measure":
        args.bandwidth = __import__("common").copy_bandwidth() if args.device == "cuda" else H200_COPY_BW
        print(f"copy bandwidth (measured): {args.bandwidth / 1e12:.3f} TB/s")
    args.bandwidth = float(args.bandwidth)
    step_rows, gen_rows, models = [], [], {}
    for family in args.models:
        args.family = family
        config = make_config(family, args.tiny, args.layers)
        model = None
        try:
            model = build(config, args.device, args.seed)
            args.weight_bytes, args.reset_us = weight_bytes(model), None
            models[family] = dict(weight_bytes=args.weight_bytes, config=config.to_dict())
            print(f"\n{family}: {args.weight_bytes / 1e9:.2f} GB of weights read per step, "
                  f"{kv_bytes(config, 1, 1)} B of K/V per token and sequence")
            if "step" in args.parts:
                eager_logits = {}
                for name in args.impls:
                    if budget.over(f"step {family} {name}"):
                        continue
                    try:
                        step_rows += bench_step(name, model, config, args, budget, eager_logits)
                    finally:
                        cleanup(args.device)
                eager_logits.clear()
            if "generate" in args.parts:
                eager_tokens = []
                if "eager" not in args.impls and not budget.over(f"generate {family} eager reference"):
                    eager_tokens = eager_reference_tokens(model, config, args)
                states = {name: {} for name in args.impls} if args.gen_runs > 1 else {}
                for run, name in [(run, name) for run in range(1, args.gen_runs + 1) for name in args.impls]:
                    if budget.over(f"generate {family} {name} run {run}"):
                        gen_rows.append(dict(model=family, impl=name, run=run, skipped="skipped (time budget)"))
                        continue
                    row = bench_generate(name, model, config, args, eager_tokens, state=states.get(name))
                    row["run"] = run
                    step = [r for r in step_rows if r["model"] == family and r["impl"] == name and r["batch"] == 1
                            and "us" in r]
                    step = min(step, key=lambda r: abs(r["ctx"] - args.prompt), default=None)
                    if step is not None:
                        row["step_us"], row["step_ctx"] = step["us"], step["ctx"]
                    gen_rows.append(row)
                    if not states:  # (interleaved runs keep every impl's compiled call: cleaned up after)
                        cleanup(args.device)
                if states:
                    states.clear()
                    cleanup(args.device)
        except Exception as e:
            traceback.print_exc()
            print(f"{family}: failed: {type(e).__name__}: {e}")
            models.setdefault(family, {})["error"] = f"{type(e).__name__}: {str(e)[:200]}"
        finally:
            model = None
            cleanup(args.device)

    cmd = "python benchmarks/bench_decode.py " + " ".join(sys.argv[1:])
    head = f"{date}, {dev} (" + ", ".join(f"{k} {v}" for k, v in vers.items()) + ")"
    if step_rows:
        how = "CUDA graphs" if args.device == "cuda" else "perf_counter on the CPU"
        step_table(step_rows, args.impls, f"### Decode step, {how}, us (`{cmd}`) -- {head}\nfloor = (weights "
                   f"but the embedding + K/V of ctx tokens) / {args.bandwidth / 1e12:.2f} TB/s; compiled "
                   + ("per shape (dynamic=False)" if args.static else "once per impl (dynamic=None)"))
        firsts = [f"{r['model']} {r['impl']} B{r['batch']} ctx{r['ctx']} {r['first_call_s']:.1f} s"
                  for r in step_rows if r.get("first_call_s", 0) > 1.0 and r["impl"] != "eager"]
        if firsts:
            print("first calls over 1 s (the compiles): " + "; ".join(firsts))
    if gen_rows:
        generate_table(gen_rows, f"### generate, batch 1, {args.prompt}-token prompt, static cache, per token "
                                 f"(`{cmd}`) -- {head}")
    if budget.skipped:
        print("skipped for the time budget: " + "; ".join(budget.skipped))
    if args.json:
        out = dict(date=date, device=dev, versions=vers, command=cmd, tiny=args.tiny, bandwidth=args.bandwidth,
                   batch=args.batch, ctx=args.ctx, slack=args.slack, static=args.static, rep_ms=args.rep_ms,
                   gen_reps=args.gen_reps, models=models, step=step_rows, generate=gen_rows,
                   skipped=budget.skipped, wall_s=time.perf_counter() - budget.start)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
