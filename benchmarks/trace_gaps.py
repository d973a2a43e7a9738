"""Where the GPU waits: the idle gaps of a torch.profiler timeline, and the host work each one waited on.

    python benchmarks/trace_gaps.py mojo_trace.json.gz [--steps 3] [--min-us 5] [--top 15]

The timeline is what `bench_train.py --profile IMPLS --profile-trace DIR` writes (any Kineto chrome trace will do).
The GPU is busy while any kernel, copy or fill runs, on any stream; a gap is a stretch between two busy ones. Each
gap is charged to the kernel that ends it: the host launched that kernel at some time (its `cudaLaunchKernel`-style
runtime call, found through the correlation id both events carry). Launched after the gap began, the GPU waited on
the host, and the gap goes to the innermost CPU op running at that launch (`aten::...`, an autograd node, a compiled
graph's region) -- the host work that was late. Launched before it began, the wait was the device's own (an event,
a stream dependency), charged to "(launched in time)". A host synchronisation inside the gap (cudaStreamSynchronize,
cudaDeviceSynchronize, a device-to-host copy) is named too: it drains the queue, and the host's launches after it
are what the GPU then waits on.
"""
from __future__ import annotations

import argparse
import bisect
import gzip
import json
from collections import defaultdict
from typing import Optional

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
# Runtime calls that block the host until the device catches up (`.item()` is a cudaMemcpyAsync, then one of these;
# a plain cudaMemcpy blocks by itself).
SYNC_CALLS = frozenset({"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy"})


def load(path: str) -> list[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    return [e for e in events if e.get("ph") == "X" and "dur" in e]


def busy_intervals(gpu: list[dict]) -> list[tuple[float, float, dict, dict]]:
    """Merged (start, end, first event, last event) stretches during which some GPU event runs."""
    out = []
    for e in sorted(gpu, key=lambda e: e["ts"]):
        start, end = float(e["ts"]), float(e["ts"]) + float(e["dur"])
        if out and start <= out[-1][1]:
            s, prev_end, first, last = out[-1]
            out[-1] = (s, max(prev_end, end), first, e if end >= prev_end else last)
        else:
            out.append((start, end, e, e))
    return out


class HostOps:
    """The CPU ops of a timeline, asked which one is innermost at a given time."""

    def __init__(self, events: list[dict]):
        self.ops = sorted((e for e in events if e.get("cat") in ("cpu_op", "user_annotation", "python_function")),
                          key=lambda e: e["ts"])
        self.starts = [float(e["ts"]) for e in self.ops]
        self.longest = max((float(e["dur"]) for e in self.ops), default=0.0)

    def innermost(self, t: float) -> Optional[dict]:
        i = bisect.bisect_right(self.starts, t)
        best = None
        while i > 0:
            i -= 1
            e = self.ops[i]
            if float(e["ts"]) < t - self.longest:
                break
            if float(e["ts"]) <= t <= float(e["ts"]) + float(e["dur"]) and (best is None or e["dur"] < best["dur"]):
                best = e
        return best


def gaps(events: list[dict], min_us: float = 5.0) -> list[dict]:
    """Each idle stretch of at least min_us between busy ones: its length, the events around it, the launch of the
    event that ends it, the host op charged and any synchronisation inside it."""
    gpu = [e for e in events if e.get("cat") in GPU_CATEGORIES]
    runtime = [e for e in events if e.get("cat") == "cuda_runtime"]
    launch_of = {e["args"]["correlation"]: e for e in runtime if "correlation" in e.get("args", {})}
    syncs = [e for e in runtime if e.get("name") in SYNC_CALLS]
    host = HostOps(events)
    out = []
    busy = busy_intervals(gpu)
    for (_, idle_from, _, before), (idle_to, _, after, _) in zip(busy, busy[1:]):
        length = idle_to - idle_from
        if length < min_us:
            continue
        launch = launch_of.get(after.get("args", {}).get("correlation"))
        late = launch is not None and float(launch["ts"]) > idle_from
        op = host.innermost(float(launch["ts"])) if late else None
        synced = [s["name"] for s in syncs if idle_from - float(s["dur"]) <= float(s["ts"]) <= idle_to]
        out.append(dict(us=length, start=idle_from, before=before.get("name", "?"), after=after.get("name", "?"),
                        charged=(op["name"] if op else "(host op unknown)") if late else "(launched in time)",
                        sync=synced[0] if synced else None))
    return out


def summary(found: list[dict], steps: int, top: int) -> str:
    total = sum(g["us"] for g in found)
    lines = [f"{len(found)} gaps, {total / 1e3:.2f} ms in all, {total / 1e3 / steps:.2f} ms per step "
             f"({steps} steps)", "", "charged to (the host op running at the late launch) | gaps | ms per step"]
    by_op = defaultdict(lambda: [0, 0.0])
    for g in found:
        key = g["charged"] + (f"  [after {g['sync']}]" if g["sync"] else "")
        by_op[key][0] += 1
        by_op[key][1] += g["us"]
    for key, (count, us) in sorted(by_op.items(), key=lambda kv: -kv[1][1])[:top]:
        lines.append(f"  {key[:90]:<90} {count:5d} {us / 1e3 / steps:8.3f}")
    lines += ["", "largest gaps: us | kernel before -> kernel after | charged to"]
    for g in sorted(found, key=lambda g: -g["us"])[:top]:
        lines.append(f"  {g['us']:9.1f} | {g['before'][:40]} -> {g['after'][:40]} | {g['charged'][:50]}"
                     + (f" [{g['sync']}]" if g["sync"] else ""))
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace")
    p.add_argument("--steps", type=int, default=3, help="steps the timeline holds (per-step figures)")
    p.add_argument("--min-us", type=float, default=5.0, help="shorter idle stretches are not gaps")
    p.add_argument("--top", type=int, default=15)
    args = p.parse_args()
    print(summary(gaps(load(args.trace), args.min_us), args.steps, args.top))


if __name__ == "__main__":
    main()
