"""A distributed training step of an HF causal LM under torch.compile: FSDP2, tensor + sequence parallelism (TP) and
both (2-D), each with eager / Inductor / mojo -- step time, peak memory per GPU, compile time, agreement with eager.

The H200 x2 runs (one process per GPU, NCCL; NVLink multicast off):

    python benchmarks/bench_distributed.py --model llama3-dims   --parallel fsdp,tp --impls eager,inductor,mojo --single
    python benchmarks/bench_distributed.py --model qwen3-8b-dims --parallel fsdp,tp --impls eager,inductor,mojo --single

and, where 4 GPUs are lent, the 2-D layout: `--world 4 --parallel fsdp,tp,2d --single`. (defaults: --layers 4,
--batch 1, --seq 4096, --steps 20, --warmup 3, --world 2.) A quick check of the NCCL plumbing on the GPUs first:
`--tiny --device cuda --steps 3`. The CPU smoke tests (gloo, tiny dims, fp32):

    python benchmarks/bench_distributed.py --tiny --parallel fsdp,tp --impls eager,mojo --world 2
    python benchmarks/bench_distributed.py --tiny --parallel 2d --impls eager,mojo --world 4

Models: bench_train.py's (`llama3-dims`: Llama-3.1-8B dims, `qwen3-8b-dims`: Qwen3-8B dims; random weights, bf16,
SDPA attention, untied head), built by its make_config / build; --tiny: its tiny dims (hidden 64, vocab 517, 2 layers,
seq 32) in fp32, on the CPU unless --device cuda. Every rank builds the model with the same seed (the same weights:
checked by a checksum, a row notes a mismatch) and feeds the same ids (seeded, random in [3, vocab)).
Layouts (--parallel), over --world ranks, one GPU each:
  fsdp    FSDP2: fully_shard on each decoder layer, then on the root, over a 1-D mesh of all ranks. Every rank runs
          its own batch (here: the same ids), so a step is world x batch x seq tokens.
  tp      tensor + sequence parallelism, torchtitan's Llama plan for HF's module names over all ranks: q/k/v and
          gate/up column-wise, o/down row-wise, the norms and the residual stream sharded on the sequence, the
          embedding row-wise (vocabulary), the LM head column-wise with replicated logits (Qwen3's q_norm / k_norm
          on each rank's heads, as torchtitan: SequenceParallel(sequence_dim=2)). A step is batch x seq tokens.
  2d      a (world / 2, 2) mesh ("dp", "tp"): the TP plan over "tp" with the embedding column-wise (its hidden dim:
          the row-wise embedding fails under torch.compile with FSDP2), then FSDP2 over "dp". Needs >= 4 ranks
          (an even number). A step is world / 2 x batch x seq tokens.
  1 GPU   (--single) the same impls on one GPU without any parallelism, in a separate run of one process.
Implementations (--impls), each a fresh model: eager (the model as it is), inductor (torch.compile(model)), mojo
(torch.compile(model, backend="mojo"), default options). mojo_compile itself is imported by bench_train.py.
Without eager in --impls, each layout still runs one untimed eager step first: the reference of the rd columns.
The step: zero_grad(set_to_none=True), then model(input_ids=ids, labels=ids).loss.backward(). The first step
compiles; then --warmup steps, then --steps timed steps, each after a device synchronize and a barrier of all ranks.
Columns:
  ms            the median over the timed steps of the slowest rank's step time; a step's time on a rank is taken
                between two CUDA events around it (host launch gaps included; time.perf_counter on the CPU)
  peak GiB/GPU  torch.cuda.max_memory_allocated, reset after the first step (warmup + timed steps), max over ranks
  compile s     wall time of the first step (compile + run), max over ranks
  loss rd       the first step's loss against the eager impl's of the same layout: |loss - loss_eager| / |loss_eager|
  gnorm rd      the same of the global gradient norm (DTensor gradients gathered by full_tensor(), one at a time)
  loss/gnorm vs fp64  (--tiny) the same against a single-process fp64 eager copy of the model (the same weights),
                its loss taken in fp64 (cross_entropy of its logits: HF's labels= loss computes in fp32)
  scaling       (--single) throughput per GPU over the 1-GPU throughput of the same impl:
                  (dp x batch x seq / ms) / world  /  (batch x seq / ms_1gpu)  =  dp x ms_1gpu / (world x ms),
                dp = world (fsdp), 1 (tp), world / 2 (2d); 1.0 is linear scaling, tp at 0.5 on 2 GPUs is no speedup
  fused sites   (mojo) mojo_compile.last_report().counts() on rank 0 after the first step: the Mojo ops fused, over
                every graph (FSDP2's hooks break the graph per layer)
A failing (layout, impl) shows "failed: ExcType: message" in its row (the traceback printed by the first rank that
failed); every rank catches it and the next case starts after a barrier. A failure on one rank only, inside a
collective, hangs the others until the process group's timeout. --budget-s: no new case starts after that many
seconds from the start ("skipped (budget)"). Output: a markdown table headed with the date, device, world size and
versions; --json OUT writes the rows (with every timed step's time, the per-rank medians and peaks).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import socket
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_train import MODELS, build, make_config  # noqa: E402
from common import cleanup, median, print_table, sync  # noqa: E402
from common import versions as common_versions  # noqa: E402

LAYOUTS = ("fsdp", "tp", "2d")
IMPLS = ("eager", "inductor", "mojo")
SINGLE = "1 GPU"
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


# ----------------------------------------------------------------------------------------------- layouts
def tp_sp_plan(family, embedding="rowwise"):
    """torchtitan's Llama plan for HF's module names (as tests/test_distributed.py's): per layer and top level.
    embedding "colwise": the embedding split on its hidden dim (the 2-D layout's)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel)

    layer = {
        "input_layernorm": SequenceParallel(),
        "self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                        desired_input_kwarg_layouts={"hidden_states": Replicate()}),
        "self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
        "self_attn.v_proj": ColwiseParallel(),
        "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),  # added to a DTensor
        "post_attention_layernorm": SequenceParallel(),
        "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
        "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),  # added to a DTensor
    }
    if family == "qwen3":  # per-head norms on each rank's heads (dim 2 of B, S, H, D); weights replicated DTensors
        layer["self_attn.q_norm"] = SequenceParallel(sequence_dim=2, use_local_output=True)
        layer["self_attn.k_norm"] = SequenceParallel(sequence_dim=2, use_local_output=True)
    split = RowwiseParallel if embedding == "rowwise" else ColwiseParallel
    top = {
        # a DTensor out of the embedding: the model reads the sequence length from it (positions, mask)
        "model.embed_tokens": split(input_layouts=Replicate(), output_layouts=Shard(1), use_local_output=False),
        "model.norm": SequenceParallel(),
        "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate(), use_local_output=True),
    }
    return layer, top


def make_meshes(layouts, device, world):
    from torch.distributed.device_mesh import init_device_mesh

    meshes = {}
    if "fsdp" in layouts or "tp" in layouts:
        meshes["1d"] = init_device_mesh(device, (world,))
    if "2d" in layouts:
        meshes["2d"] = init_device_mesh(device, (world // 2, 2), mesh_dim_names=("dp", "tp"))
    return meshes


def apply_layout(model, layout, meshes, family):
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import parallelize_module

    if layout == SINGLE:
        return
    if layout in ("tp", "2d"):
        mesh = meshes["1d"] if layout == "tp" else meshes["2d"]["tp"]
        layer_plan, top_plan = tp_sp_plan(family, "rowwise" if layout == "tp" else "colwise")
        for layer in model.model.layers:
            parallelize_module(layer, mesh, layer_plan)
        parallelize_module(model, mesh, top_plan)
    if layout in ("fsdp", "2d"):
        mesh = meshes["1d"] if layout == "fsdp" else meshes["2d"]["dp"]
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)


def dp_size(layout, world):
    return {"fsdp": world, "tp": 1, "2d": world // 2, SINGLE: 1}[layout]


# ----------------------------------------------------------------------------------------------- one case
def scalar(t):
    from torch.distributed.tensor import DTensor

    return (t.full_tensor() if isinstance(t, DTensor) else t).double().item()


def grad_norm(model):
    """The global gradient norm: each DTensor gradient gathered whole (a collective: every rank, the same order)."""
    from torch.distributed.tensor import DTensor

    total, missing = 0.0, []
    for name, p in model.named_parameters():
        g = p.grad
        if g is None:
            missing.append(name)
            continue
        if isinstance(g, DTensor):
            g = g.full_tensor()
        total += torch.linalg.vector_norm(g, dtype=torch.float64 if g.dtype == torch.float64 else torch.float32
                                          ).item() ** 2
        del g
    return math.sqrt(total), missing


def checksum(model):
    return sum(p.detach().double().sum().item() for p in model.parameters())


def run_case(layout, impl, ctx, timed=True):
    """This rank's numbers of one (layout, impl): build, lay out, compile (the first step), warmup, timed steps."""
    args, device = ctx["args"], ctx["args"].device
    res = dict(layout=layout, impl=impl)
    if device == "cuda":
        res["resident_before_gib"] = torch.cuda.memory_allocated() / 2 ** 30
    model = build(ctx["config"], args, ctx["dtype"])
    res["checksum"] = checksum(model)
    apply_layout(model, layout, ctx["meshes"], ctx["family"])
    if impl == "inductor":
        runner = torch.compile(model)
    elif impl == "mojo":
        import mojo_compile
        mojo_compile.reset_report()
        runner = torch.compile(model, backend="mojo")
    else:
        runner = model
    ids = ctx["ids"]

    def step():
        model.zero_grad(set_to_none=True)
        loss = runner(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss.detach()

    def barrier():
        sync(device)
        dist.barrier()

    barrier()
    t = time.perf_counter()
    loss = step()
    sync(device)
    res["compile_s"] = time.perf_counter() - t
    res["loss"] = scalar(loss)
    res["grad_norm"], res["missing_grads"] = grad_norm(model)
    if impl == "mojo" and dist.get_rank() == 0:
        import mojo_compile
        report = mojo_compile.last_report()
        res["mojo_graphs"] = len(report.graphs)
        res["mojo_fused"] = dict(sorted(report.counts().items()))
    if not timed:
        return res

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for _ in range(args.warmup):
        barrier()
        step()
    times = []
    for _ in range(args.steps):
        barrier()
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t = time.perf_counter()
            step()
            times.append((time.perf_counter() - t) * 1e3)
    res["times_ms"] = times
    if device == "cuda":
        res["peak_gib"] = torch.cuda.max_memory_allocated() / 2 ** 30
    return res


def merge(parts):
    """One row from every rank's numbers of a case (rank 0's for the rest)."""
    row = dict(parts[0])
    row["compile_s"] = max(p["compile_s"] for p in parts)
    if "times_ms" in row:
        row["times_ms"] = [max(ts) for ts in zip(*(p["times_ms"] for p in parts))]  # each step: the slowest rank
        row["ms"] = median(row["times_ms"])
        row["ms_per_rank"] = [median(p["times_ms"]) for p in parts]
    if "peak_gib" in row:
        row["peak_gib_per_rank"] = [p["peak_gib"] for p in parts]
        row["peak_gib"] = max(row["peak_gib_per_rank"])
    sums = [p["checksum"] for p in parts]
    if max(sums) != min(sums):
        row["note"] = f"weights differ across ranks (checksums {min(sums)!r} .. {max(sums)!r})"
    losses = [p["loss"] for p in parts]
    if max(losses) - min(losses) > 1e-6 * abs(losses[0]):
        row["note"] = (row.get("note", "") + f"; losses differ across ranks ({min(losses)!r} .. {max(losses)!r})")
    return row


def fp64_reference(ctx):
    """(loss, grad norm) of one step of a single-process fp64 eager copy of the model (the same weights)."""
    args = ctx["args"]
    model = build(ctx["config"], args, ctx["dtype"])
    weights = {k: v.detach().double() for k, v in model.state_dict().items()}
    del model
    model = build(ctx["config"], args, torch.float64, weights)
    ids = ctx["ids"]
    logits = model(input_ids=ids).logits  # the loss in fp64 (HF's loss upcasts the logits to fp32 only)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())  # as labels=ids
    loss.backward()
    out = loss.item(), grad_norm(model)[0]
    del model, logits, loss
    cleanup(args.device)
    return out


# ----------------------------------------------------------------------------------------------- the ranks
def device_name(device):
    if device == "cuda":
        return torch.cuda.get_device_name()
    return f"CPU {platform.machine()} ({torch.get_num_threads()} thread(s) per rank)"


def error_text(e):
    msg = (str(e).strip().splitlines() or [""])[0].replace("|", "/")
    return f"failed: {type(e).__name__}: {msg[:100]}"


def worker(rank, world, port, args, layouts, deadline, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    cuda = args.device == "cuda"
    if cuda:
        for k, v in NO_MULTICAST.items():
            os.environ.setdefault(k, v)
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // args.world))  # --single's process: the ranks' share
        dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        family, config = make_config(args)
        gen = torch.Generator().manual_seed(args.seed + 1)
        ids = torch.randint(3, config.vocab_size, (args.batch, args.seq), generator=gen).to(args.device)
        ctx = dict(args=args, family=family, config=config, ids=ids, meshes=make_meshes(layouts, args.device, world),
                   dtype=torch.float32 if args.tiny else torch.bfloat16)
        if rank == 0:
            queue.put(("meta", dict(device=device_name(args.device))))
            if args.tiny:
                queue.put(("fp64", fp64_reference(ctx)))
        dist.barrier()
        for layout in layouts:
            refs = {}
            cases = [("eager", "eager" in args.impls)] + [(i, True) for i in args.impls if i != "eager"]
            for impl, timed in cases:
                over = [time.time() > deadline]
                dist.broadcast_object_list(over, src=0)
                if over[0]:
                    if rank == 0 and timed:
                        queue.put(("row", dict(layout=layout, impl=impl, error="skipped (budget)")))
                    continue
                res = err = tb = None
                try:
                    res = run_case(layout, impl, ctx, timed)
                except Exception as e:
                    err, tb = error_text(e), traceback.format_exc()
                cleanup(args.device)
                parts = [None] * world
                dist.all_gather_object(parts, (res, err))
                failed = [r for r, (_, e) in enumerate(parts) if e is not None]
                if failed and rank == failed[0]:
                    print(f"[rank {rank}] {layout} / {impl}:\n{tb}", file=sys.stderr, flush=True)
                if failed:
                    row = dict(layout=layout, impl=impl, error=parts[failed[0]][1], failed_ranks=failed)
                else:
                    row = merge([p[0] for p in parts])
                    if impl == "eager":
                        refs["eager"] = row["loss"], row["grad_norm"]
                    if "eager" in refs:
                        row["loss_rel_diff"] = rel(row["loss"], refs["eager"][0])
                        row["grad_norm_rel_diff"] = rel(row["grad_norm"], refs["eager"][1])
                if rank == 0:
                    if timed:
                        queue.put(("row", row))
                    print(f"[{layout} / {impl}{'' if timed else ' (reference)'}] "
                          + (row.get("error") or f"loss {row['loss']:.6g}, grad norm {row['grad_norm']:.6g}, "
                             f"compile {row['compile_s']:.1f} s" + (f", {row['ms']:.2f} ms" if timed else "")),
                          flush=True)
                dist.barrier()
    finally:
        dist.destroy_process_group()


def rel(x, ref):
    return abs(x - ref) / max(abs(ref), 1e-300)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(world, layouts, args, deadline, out):
    """Spawn `world` ranks running `layouts`; their rows into out["rows"] (a crash: the missing cases failed)."""
    queue = mp.get_context("spawn").SimpleQueue()
    crash = None
    try:
        mp.spawn(worker, args=(world, free_port(), args, layouts, deadline, queue), nprocs=world)
    except Exception as e:
        lines = str(e).strip().splitlines() or [type(e).__name__]
        crash = f"failed: rank crashed ({lines[-1][:100]})".replace("|", "/")
    done = set()
    while not queue.empty():
        kind, value = queue.get()
        if kind == "row":
            out["rows"].append(value)
            done.add((value["layout"], value["impl"]))
        else:  # meta, fp64: the first run's (the distributed one's, before --single's)
            out.setdefault(kind, value)
    for layout in layouts:
        for impl in args.impls:
            if (layout, impl) not in done:
                out["rows"].append(dict(layout=layout, impl=impl, error=crash or "failed: no result"))


# ----------------------------------------------------------------------------------------------- output
def g(x, spec):
    return "" if x is None else format(x, spec)


def table(rows, args, fp64, title):
    header = ["layout", "impl", "ms", "peak GiB/GPU", "compile s", "loss rd", "gnorm rd"]
    if fp64:
        header += ["loss vs fp64", "gnorm vs fp64"]
    if args.single:
        header += ["scaling"]
    header += ["fused sites (mojo)"]
    out = []
    for r in rows:
        if "error" in r:
            out.append([r["layout"], r["impl"], r["error"]] + [""] * (len(header) - 3))
            continue
        ref = r["impl"] == "eager"
        cells = [r["layout"], r["impl"], g(r.get("ms"), ".2f"),
                 g(r.get("peak_gib"), ".2f") if args.device == "cuda" else "n/a", f"{r['compile_s']:.1f}",
                 "ref" if ref else g(r.get("loss_rel_diff"), ".1e"),
                 "ref" if ref else g(r.get("grad_norm_rel_diff"), ".1e")]
        if fp64:
            cells += [g(r.get("loss_rel_diff_fp64"), ".1e"), g(r.get("grad_norm_rel_diff_fp64"), ".1e")]
        if args.single:
            cells += [g(r.get("scaling"), ".2f")]
        fused = r.get("mojo_fused")
        cells += ["" if fused is None else (", ".join(f"{op.removeprefix('mojo.')} x{n}" for op, n in fused.items())
                                            or "nothing fused")]
        out.append(cells)
    print_table(title, header, out)


# ----------------------------------------------------------------------------------------------- main
def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--parallel", default="fsdp,tp,2d", help="comma-separated layouts of " + ",".join(LAYOUTS))
    p.add_argument("--impls", default="eager,inductor,mojo", help="comma-separated subset of " + ",".join(IMPLS))
    p.add_argument("--model", choices=sorted(MODELS), default="llama3-dims")
    p.add_argument("--tiny", action="store_true", help="tiny dims, fp32, 2 layers, seq 32 (the CPU and gloo)")
    p.add_argument("--layers", type=int, help="decoder layers (default 4; 2 with --tiny)")
    p.add_argument("--batch", type=int, default=1, help="sequences per rank (per data-parallel group for tp / 2d)")
    p.add_argument("--seq", type=int, help="tokens per sequence (default 4096; 32 with --tiny)")
    p.add_argument("--steps", type=int, help="timed steps (the median is reported; default 20, 5 with --tiny)")
    p.add_argument("--warmup", type=int, help="untimed steps after the first (default 3, 1 with --tiny)")
    p.add_argument("--world", type=int, default=2, help="ranks (one GPU each)")
    p.add_argument("--single", action="store_true", help="also run the impls on 1 GPU without parallelism (scaling)")
    p.add_argument("--budget-s", type=float, help="start no new case after this many seconds (default: no limit)")
    p.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"], help="HF attn_implementation")
    p.add_argument("--device", choices=["cuda", "cpu"],
                   help="default: cuda where there is one, but cpu with --tiny")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="OUT", help="write the rows as JSON to OUT")
    args = p.parse_args()
    args.layers = args.layers or (2 if args.tiny else 4)
    args.seq = args.seq or (32 if args.tiny else 4096)
    args.steps = args.steps or (5 if args.tiny else 20)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.tiny else 3)
    args.device = args.device or ("cuda" if torch.cuda.is_available() and not args.tiny else "cpu")
    for name, known in (("parallel", LAYOUTS), ("impls", IMPLS)):
        chosen = [s.strip() for s in getattr(args, name).split(",") if s.strip()]
        unknown = [s for s in chosen if s not in known]
        if unknown or not chosen:
            p.error(f"--{name}: unknown or none {unknown}; choose from {','.join(known)}")
        setattr(args, name, [s for s in known if s in chosen])  # the run order: eager first
    if args.device == "cpu" and not args.tiny:
        p.error("the full-size models need CUDA; on the CPU use --tiny")
    if args.device == "cuda" and torch.cuda.device_count() < args.world:
        p.error(f"--world {args.world} needs {args.world} GPUs; {torch.cuda.device_count()} visible")
    if args.world < 1:
        p.error("--world must be >= 1")
    return args


def main():
    args = parse()
    if args.device == "cuda":
        for k, v in NO_MULTICAST.items():  # the ranks inherit it: NVLink multicast stays off
            os.environ.setdefault(k, v)
    else:
        os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # a few cores shared by every rank
    start = time.time()
    deadline = start + args.budget_s if args.budget_s else float("inf")
    date, vers = datetime.date.today().isoformat(), common_versions()
    out = dict(rows=[])
    two_d_ok = args.world >= 4 and args.world % 2 == 0
    layouts = [lay for lay in args.parallel if lay != "2d" or two_d_ok]
    if layouts:
        launch(args.world, layouts, args, deadline, out)
    if "2d" in args.parallel and not two_d_ok:
        out["rows"] += [dict(layout="2d", impl=i, error=f"needs an even world >= 4 (--world 4), not {args.world}")
                        for i in args.impls]
    if args.single:
        launch(1, [SINGLE], args, deadline, out)
    rows = out["rows"]
    single = {r["impl"]: r["ms"] for r in rows if r["layout"] == SINGLE and "ms" in r}
    for r in rows:
        if "ms" in r and r["layout"] != SINGLE and r["impl"] in single:
            r["scaling"] = dp_size(r["layout"], args.world) * single[r["impl"]] / (args.world * r["ms"])
        if "fp64" in out and "loss" in r:
            r["loss_rel_diff_fp64"] = rel(r["loss"], out["fp64"][0])
            r["grad_norm_rel_diff_fp64"] = rel(r["grad_norm"], out["fp64"][1])

    dev = out.get("meta", {}).get("device", args.device)
    cmd = "python benchmarks/bench_distributed.py " + " ".join(sys.argv[1:])
    shape = f"{args.layers} layers, {args.batch}x{args.seq} tokens per rank" + (", tiny fp32" if args.tiny else "")
    head = f"{date}, {dev}, world {args.world}, " + ", ".join(f"{k} {v}" for k, v in vers.items())
    print(f"\n{head}")
    title = f"### Distributed train step: {args.model} {shape} (`{cmd}`) -- {head}"
    table(rows, args, "fp64" in out, title)
    print(f"\nms: median of {args.steps} steps after {args.warmup} warmup (each the slowest rank's); rd: the first "
          "step's relative difference against eager of the same layout" + (" and an fp64 copy" if "fp64" in out else "")
          + ("; scaling = dp x ms_1gpu / (world x ms)" if args.single else "")
          + f"; {time.time() - start:.0f} s in all")
    for r in rows:
        if r.get("note"):
            print(f"note: {r['layout']} / {r['impl']}: {r['note']}")
        if r.get("missing_grads"):
            print(f"note: {r['layout']} / {r['impl']}: no gradient for {', '.join(r['missing_grads'])}")
    if args.json:
        result = dict(date=date, device=dev, versions=vers, command=cmd, world=args.world, model=args.model,
                      tiny=args.tiny, layers=args.layers, batch=args.batch, seq=args.seq, steps=args.steps,
                      warmup=args.warmup, attn_implementation=args.attn, rows=rows,
                      fp64=dict(loss=out["fp64"][0], grad_norm=out["fp64"][1]) if "fp64" in out else None)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1, default=str)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
