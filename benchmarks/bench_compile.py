"""Compile time (issue 15): Inductor against mojo on 4-layer LLMs of 8B dims, each compile in a fresh process with
empty caches.

    python benchmarks/bench_compile.py [--model llama,qwen3] [--workload prefill,decode] [--json OUT]
    python benchmarks/bench_compile.py --tiny --mojo-inner eager [--impls mojo-cold,mojo-warm]   (CPU smoke test)

Models: those of bench_decode.py (Llama-3.1-8B dims, vocab 128256; Qwen3-8B dims, vocab 151936), 4 layers, random
weights, bf16, SDPA, on the GPU. Workloads, each a function compiled with torch.compile (default mode; mojo:
backend="mojo"):
  prefill  one forward of 1 x 4096 tokens, no cache, no grad: ids -> logits
  decode   one decode step, batch 1, against a StaticCache holding 4096 random tokens (4160 slots):
           (ids, positions, cache) -> logits, as in bench_decode.py's step
Variants, each measured in its own fresh Python process (no in-memory Dynamo / Inductor / Triton state) with a
fresh, empty TORCHINDUCTOR_CACHE_DIR (Inductor's FX graph, AOTAutograd and autotune caches) and TRITON_CACHE_DIR
(compiled kernels), removed afterwards:
  inductor   torch.compile(fn)
  mojo-traced  torch.compile(fn, backend="mojo") with a fresh, empty MOJO_CACHE_DIR (mojo's on-disk cache of traced
             patterns; MOJO_PATTERN_CACHE is removed from the environment, so the cache is on), and the package's
             shipped traces not read: every pattern traces, as with a torch or Python the package ships none for
  mojo-cold  the same, with the shipped traces read where the package has them for this torch and Python
             (mojo_compile/pattern_data; `mojo-compile warm-cache --ship`): a first compile as users get it
  mojo-warm  the same in another fresh process reusing the MOJO_CACHE_DIR that this model and workload's cold run
             filled (Inductor and Triton caches still fresh and empty)
Time = wall time of the first call of the compiled function (compile + first run), synchronised before and after.
Before the clock starts, the process has imported torch, transformers, mojo_compile and torch._inductor.compile_fx,
built the model and run the workload once eagerly (CUDA context, cuBLAS and SDPA warm), so what is timed is Dynamo +
AOTAutograd + (mojo's rewrite +) Inductor + Triton compiles + one run. The second call's time is printed for
reference (what the first call is over a warm call). The files each cache dir holds after the run are counted: a
MOJO_CACHE_DIR still empty after a cold run means this mojo_compile writes no pattern cache there, so warm = cold.
To save wall time, the next process's start-up (imports, model build, eager warm-up: ~10 s) overlaps the current
process's timed compile, except a warm run's, which waits for its cold run to finish (--no-overlap: none overlap;
the overlap costs the timed process at most one CPU core of the machine's, for those seconds).
--budget-s (default 225; none with --tiny) starts no new process after that many seconds, printing what was skipped.
--phases: where each first call's time goes: torch's `dynamo_timed` phases (Dynamo's trace, the backend call,
AOTAutograd, Inductor's lowering and code generation, waiting on the Triton compiles) and, for mojo, its own passes
(the backend call less its inner compile), summed over the process's graphs, in a table per process.
--profile-dir DIR: a cProfile stats file of each process's first call (read it with `python -m pstats`).
--tiny: bench_decode.py's tiny dims on the CPU, prefill of 64 tokens, decode against 32 (the plumbing, not
timings); --mojo-inner eager (MOJO_INNER=eager) skips mojo's inner Inductor compile there.
Output: a table per (model, workload) with the mojo / Inductor ratios, a detail table per process, --json OUT.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS = ("inductor", "mojo-traced", "mojo-cold", "mojo-warm")
WORKLOADS = ("prefill", "decode")
CACHE_ENV = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "MOJO_CACHE_DIR")


# ----------------------------------------------------------------------------------------------- the child process
def child(args):
    """One timed compile in this (fresh) process: setup, then wait for the go file, then time the first call."""
    import torch

    sys.path.insert(0, HERE)
    import bench_decode as bd  # imports mojo_compile (the backend's registration)
    import torch._inductor.compile_fx  # noqa: F401  (mojo's inner compiler too: imported before the clock, by both)

    device = "cpu" if args.tiny else "cuda"
    res = dict(model=args.model, workload=args.workload, variant=args.variant)
    t0 = time.perf_counter()
    config = bd.make_config(args.model, args.tiny)
    model = bd.build(config, device)
    if args.workload == "prefill":
        ids = torch.randint(3, config.vocab_size, (1, args.tokens), device=device)

        def fwd(ids):
            return model(input_ids=ids, use_cache=False).logits

        inputs = (ids,)
        reset = None
    else:
        ctx = args.tokens
        cache, counters = bd.make_cache(config, 1, ctx, ctx + bd.SLACK, device)
        ids = torch.randint(3, config.vocab_size, (1, 1), device=device)
        pos = torch.full((1, 1), ctx, dtype=torch.long, device=device)
        fwd = bd.step_fn(model)
        inputs = (ids, pos, cache)

        def reset():
            for c in counters:
                c.fill_(ctx)

    def call(fn):
        if reset is not None:
            reset()
        return fn(*inputs)

    if args.variant != "inductor" and args.phases:
        _time_inner_compile(res)
    if args.variant == "mojo-traced":
        from mojo_compile import pattern_cache
        pattern_cache.SHIPPED_DIR = os.path.join(args.job_dir, "no-shipped-traces")
    with torch.no_grad():
        call(fwd)  # eager warm-up: CUDA context, cuBLAS, SDPA kernels
        fn = torch.compile(fwd) if args.variant == "inductor" else torch.compile(fwd, backend="mojo")
        bd.sync(device)
        res["setup_s"] = time.perf_counter() - t0
        with open(os.path.join(args.job_dir, "ready"), "w"):
            pass
        go, waited = os.path.join(args.job_dir, "go"), time.perf_counter()
        while not os.path.exists(go):  # the parent says go once the process before this one is done
            if time.perf_counter() - waited > 900:
                sys.exit("no go from the parent in 900 s")
            time.sleep(0.01)
        profiler = None
        if args.profile_dir:
            import cProfile
            profiler = cProfile.Profile()
            profiler.enable()
        _, res["first_call_s"] = bd.first_call(lambda: call(fn), device)
        if profiler is not None:
            profiler.disable()
            os.makedirs(args.profile_dir, exist_ok=True)
            profiler.dump_stats(os.path.join(args.profile_dir, f"{args.model}-{args.workload}-{args.variant}.prof"))
        _, second = bd.first_call(lambda: call(fn), device)
    res["second_call_ms"] = second * 1e3
    from torch._dynamo.utils import counters as dc
    res["graphs"] = dc["stats"]["unique_graphs"]
    res["graph_breaks"] = sum(dc["graph_break"].values())
    if args.variant != "inductor":
        res["mojo"] = bd.mojo_line()
    if args.phases:
        from torch._dynamo.utils import compilation_time_metrics
        res["phases"] = {**{k: sum(v) for k, v in compilation_time_metrics.items()}, **res.get("phases", {})}
    with open(os.path.join(args.job_dir, "result.json"), "w") as f:
        json.dump(res, f)


def _time_inner_compile(res):
    """Adds mojo's inner compile time (Inductor on the rewritten graph) to res["phases"] as it runs: the backend
    call's time less this is mojo's own passes."""
    import mojo_compile.backend as backend

    inner = backend.inner_compile

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            phases = res.setdefault("phases", {})
            phases["mojo inner_compile"] = phases.get("mojo inner_compile", 0.0) + time.perf_counter() - start

    backend.inner_compile = timed  # the backend looks it up in its module at each call


# ----------------------------------------------------------------------------------------------- the parent
def tokens_for(workload, args):
    return args.tokens or ((64 if workload == "prefill" else 32) if args.tiny else 4096)


def files_in(path):
    return sum(len(files) for _, _, files in os.walk(path)) if path and os.path.isdir(path) else 0


class Job:
    def __init__(self, model, workload, variant, mojo_dir, args):
        self.model, self.workload, self.variant, self.args = model, workload, variant, args
        self.tokens = tokens_for(workload, args)
        self.dir = tempfile.mkdtemp(prefix=f"compile-{model}-{workload}-{variant}-")
        self.env = {k: v for k, v in os.environ.items() if k != "MOJO_PATTERN_CACHE"}
        self.caches = {"TORCHINDUCTOR_CACHE_DIR": tempfile.mkdtemp(prefix="inductor-cache-"),
                       "TRITON_CACHE_DIR": tempfile.mkdtemp(prefix="triton-cache-"),
                       "MOJO_CACHE_DIR": mojo_dir if variant in ("mojo-cold", "mojo-warm")
                       else tempfile.mkdtemp(prefix="mojo-")}
        self.env.update(self.caches)
        if args.mojo_inner:
            self.env["MOJO_INNER"] = args.mojo_inner
        self.proc = None
        self.started = None

    def start(self):
        cmd = [sys.executable, os.path.abspath(__file__), "--child", "--model", self.model, "--workload",
               self.workload, "--variant", self.variant, "--job-dir", self.dir, "--tokens", str(self.tokens)]
        if self.args.tiny:
            cmd.append("--tiny")
        if self.args.phases:
            cmd.append("--phases")
        if self.args.profile_dir:
            cmd += ["--profile-dir", os.path.abspath(self.args.profile_dir)]
        self.out = open(os.path.join(self.dir, "log"), "w")
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=self.out, stderr=subprocess.STDOUT, cwd=os.getcwd())
        self.started = time.perf_counter()

    def wait_ready(self, timeout):
        ready = os.path.join(self.dir, "ready")
        while not os.path.exists(ready):
            if self.proc.poll() is not None:
                return False
            if time.perf_counter() - self.started > timeout:
                return False
            time.sleep(0.01)
        return True

    def go(self):
        with open(os.path.join(self.dir, "go"), "w"):
            pass

    def finish(self, timeout):
        res = dict(model=self.model, workload=self.workload, variant=self.variant, tokens=self.tokens)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            res["error"] = f"timed out after {timeout} s"
        self.out.close()
        path = os.path.join(self.dir, "result.json")
        if os.path.exists(path):
            with open(path) as f:
                res.update(json.load(f))
        elif "error" not in res:
            res["error"] = f"exit {self.proc.returncode}"
        res["cache_files"] = {k: files_in(v) for k, v in self.caches.items()}
        if "error" in res or self.args.verbose:
            with open(os.path.join(self.dir, "log")) as f:
                print(f.read()[-4000:])
        return res

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
            self.out.close()

    def cleanup(self):
        for k in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
            shutil.rmtree(self.caches[k], ignore_errors=True)
        if self.variant == "inductor":
            shutil.rmtree(self.caches["MOJO_CACHE_DIR"], ignore_errors=True)
        shutil.rmtree(self.dir, ignore_errors=True)


def run_all(args):
    """The jobs in order: per model and workload, inductor, mojo-cold, mojo-warm."""
    start = time.perf_counter()
    jobs, mojo_dirs = [], []
    for model in args.models:
        for workload in args.workloads:
            mojo_dir = tempfile.mkdtemp(prefix=f"mojo-cache-{model}-{workload}-")
            mojo_dirs.append(mojo_dir)
            for variant in args.impls:
                jobs.append(Job(model, workload, variant, mojo_dir, args))
    results, skipped = [], []

    def over(job):
        spent = time.perf_counter() - start
        if args.budget_s and spent > args.budget_s:
            what = f"{job.model} {job.workload} {job.variant}"
            skipped.append(what)
            print(f"skipped {what}: {spent:.0f} s spent, over --budget-s {args.budget_s:g}", flush=True)
            return True
        return False

    try:
        for i, job in enumerate(jobs):
            if job.proc is None:
                if over(job):
                    results.append(dict(model=job.model, workload=job.workload, variant=job.variant,
                                        tokens=job.tokens, skipped="time budget"))
                    job.cleanup()
                    continue
                job.start()
            if not job.wait_ready(args.child_timeout):
                job.kill()
                results.append(job.finish(1))
                job.cleanup()
                continue
            nxt = jobs[i + 1] if i + 1 < len(jobs) else None
            # the next process's start-up overlaps this one's compile, unless it is the warm run of this cold one
            waits = nxt is not None and nxt.variant == "mojo-warm" and (nxt.model, nxt.workload) == (job.model,
                                                                                                     job.workload)
            spent = time.perf_counter() - start
            if not args.no_overlap and nxt is not None and not waits and not (args.budget_s and spent > args.budget_s):
                nxt.start()
            job.go()
            res = job.finish(args.child_timeout)
            res["wall_s"] = time.perf_counter() - job.started
            results.append(res)
            print(f"{job.model} {job.workload} {job.variant}: " + (
                res["error"] if "error" in res else f"first call {res['first_call_s']:.1f} s, second "
                f"{res['second_call_ms']:.1f} ms, {res['graphs']} graph(s), {res['graph_breaks']} break(s); cache "
                "files " + ", ".join(f"{k.split('_')[0].lower()} {n}" for k, n in res["cache_files"].items())
                + (f"; mojo: {res['mojo']}" if "mojo" in res else "")), flush=True)
            job.cleanup()
    finally:
        for job in jobs:
            if job.proc is not None and job.proc.poll() is None:
                job.kill()
                job.cleanup()
        for d in mojo_dirs:
            shutil.rmtree(d, ignore_errors=True)
    return results, skipped, time.perf_counter() - start


def tables(results, args, title):
    sys.path.insert(0, HERE)
    from common import print_table

    by = {}
    for r in results:
        by.setdefault((r["model"], r["workload"]), {})[r["variant"]] = r

    def cell(r):
        if r is None:
            return "-"
        if "first_call_s" in r:
            return f"{r['first_call_s']:.1f}"
        return "skipped" if "skipped" in r else "failed"

    def ratio(a, b):
        a, b = (a or {}).get("first_call_s"), (b or {}).get("first_call_s")
        return f"{a / b:.2f}" if a and b else "-"

    rows = []
    for (model, workload), d in by.items():
        ind = d.get("inductor")
        rows.append([model, workload, cell(ind), cell(d.get("mojo-traced")), ratio(d.get("mojo-traced"), ind),
                     cell(d.get("mojo-cold")), ratio(d.get("mojo-cold"), ind), cell(d.get("mojo-warm")),
                     ratio(d.get("mojo-warm"), ind)])
    print_table(title, ["model", "workload", "Inductor s", "mojo traced s", "traced / Inductor", "mojo cold s",
                        "cold / Inductor", "mojo warm s", "warm / Inductor"], rows)
    detail = []
    for r in results:
        c = r.get("cache_files", {})
        detail.append([r["model"], r["workload"], r["variant"],
                       r.get("skipped") or r.get("error", "")[:50] or f"{r['first_call_s']:.2f}",
                       f"{r['second_call_ms']:.1f}" if "second_call_ms" in r else "-",
                       f"{r['setup_s']:.1f}" if "setup_s" in r else "-", str(r.get("graphs", "-")),
                       str(r.get("graph_breaks", "-")), str(c.get("TORCHINDUCTOR_CACHE_DIR", "-")),
                       str(c.get("TRITON_CACHE_DIR", "-")), str(c.get("MOJO_CACHE_DIR", "-"))])
    print_table("per process", ["model", "workload", "variant", "first call s", "second call ms", "setup s",
                                "graphs", "breaks", "inductor cache files", "triton cache files",
                                "mojo cache files"], detail)
    cold = [r for r in results if r["variant"] == "mojo-cold" and "cache_files" in r and "error" not in r]
    if cold and all(r["cache_files"].get("MOJO_CACHE_DIR", 0) == 0 for r in cold):
        print("note: MOJO_CACHE_DIR stayed empty after every cold run: the shipped traces held every pattern trace "
              "and no mask was proved (or this mojo_compile keeps no cache), so warm measures the same as cold")


def phase_tables(results, top=14):
    """Per process, its largest phases (s, summed over its graphs); nested phases overlap (the backend call holds
    AOTAutograd and Inductor), so they do not add up to the first call."""
    from common import print_table

    for r in results:
        phases = dict(r.get("phases") or {})
        if not phases:
            continue
        rows = [[name, f"{s:.2f}"] for name, s in sorted(phases.items(), key=lambda kv: -kv[1])[:top]]
        if "mojo inner_compile" in phases and "OutputGraph.call_user_compiler" in phases:
            own = phases["OutputGraph.call_user_compiler"] - phases["mojo inner_compile"]
            rows.insert(0, ["mojo's own passes (backend call less inner compile)", f"{own:.2f}"])
        title = f"phases, {r['model']} {r['workload']} {r['variant']} (first call {r.get('first_call_s', 0):.1f} s)"
        print_table(title, ["phase", "s"], rows)


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="llama,qwen3", help="comma-separated subset of llama,qwen3")
    p.add_argument("--workload", default=",".join(WORKLOADS), help="comma-separated subset of prefill,decode")
    p.add_argument("--impls", default=",".join(VARIANTS), help="comma-separated subset of " + ",".join(VARIANTS))
    p.add_argument("--tokens", type=int, help="prefill tokens / decode context (default 4096; 64 / 32 with --tiny)")
    p.add_argument("--tiny", action="store_true", help="tiny dims on the CPU: the plumbing, not timings")
    p.add_argument("--mojo-inner", choices=["inductor", "eager"], help="MOJO_INNER for the mojo processes")
    p.add_argument("--no-overlap", action="store_true", help="start each process only after the previous ended")
    p.add_argument("--budget-s", type=float, help="start no process after this many s (default 225; --tiny: no limit)")
    p.add_argument("--child-timeout", type=float, default=300, help="seconds one process may take")
    p.add_argument("--verbose", action="store_true", help="print every process's log tail")
    p.add_argument("--phases", action="store_true", help="a table per process of where the first call's time goes")
    p.add_argument("--profile-dir", metavar="DIR", help="cProfile each process's first call (the main thread: "
                   "Triton's compile workers not included) into DIR/MODEL-WORKLOAD-VARIANT.prof; it slows that call")
    p.add_argument("--json", metavar="OUT", help="write the results as JSON to OUT")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--variant", help=argparse.SUPPRESS)
    p.add_argument("--job-dir", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.budget_s is None:
        args.budget_s = 0 if args.tiny else 225
    if args.child:
        return args
    args.models = [m for m in args.model.split(",") if m]
    args.workloads = [w for w in args.workload.split(",") if w]
    impls = [v for v in args.impls.split(",") if v]
    bad = [m for m in args.models if m not in ("llama", "qwen3")] + [w for w in args.workloads if w not in WORKLOADS] \
        + [v for v in impls if v not in VARIANTS]
    if bad:
        p.error(f"unknown {bad}")
    if "mojo-warm" in impls and "mojo-cold" not in impls:
        impls.append("mojo-cold")  # warm reuses the cache dir its cold run filled
        print("mojo-warm needs the cold run that fills its MOJO_CACHE_DIR: mojo-cold added")
    args.impls = [v for v in VARIANTS if v in impls]
    return args


def main():
    args = parse()
    if args.child:
        args.tokens = tokens_for(args.workload, args)
        child(args)
        return
    import torch

    sys.path.insert(0, HERE)
    from common import versions
    vers = versions()
    dev = "CPU" if args.tiny else (torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU")
    date = datetime.date.today().isoformat()
    print(f"{date}  {dev}  " + ", ".join(f"{k} {v}" for k, v in vers.items()), flush=True)
    if not args.tiny and not torch.cuda.is_available():
        sys.exit("the full-size models need CUDA; on the CPU use --tiny")
    results, skipped, wall = run_all(args)
    cmd = "python benchmarks/bench_compile.py " + " ".join(sys.argv[1:])
    tables(results, args, f"### Compile time, first call in a fresh process, s (`{cmd}`) -- {date}, {dev} ("
           + ", ".join(f"{k} {v}" for k, v in vers.items()) + ")")
    if args.phases:
        phase_tables(results)
    if skipped:
        print("skipped for the time budget: " + "; ".join(skipped))
    print(f"wall time {wall:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(date=date, device=dev, versions=vers, command=cmd, tiny=args.tiny, results=results,
                           skipped=skipped, wall_s=wall), f, indent=1, default=str)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
