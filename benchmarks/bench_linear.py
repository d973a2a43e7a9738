"""The decode linears (issue 15): `mojo.linear`, `mojo.gated_linear` and `mojo.linear3` (Triton GEMVs, ttx) against
cuBLAS, per weight shape of the 8B-dims decode step, at 1, 2 and 4 rows.

    python benchmarks/bench_linear.py [--model llama,qwen3] [--rows 1,2,4] [--json OUT]
    python benchmarks/bench_linear.py --tiny        (the CPU smoke test: the torch target, tiny shapes)

Each row of the table times `--layers` (default 4) copies of its weights in one CUDA graph, one call per copy, so no
weight is still in L2 when it is read again (a decode step reads each weight once); triton.testing's
do_bench_cudagraph, median, divided by the copies. TB/s = the bytes of the weights (and x, y) / time.
  linear        F.linear (cuBLAS)                         mojo.linear (ttx)
  gate + up     F.linear x 2 + silu(g) * u (eager ops)    mojo.gated_linear (ttx): one pass over both weights
  q, k, v       F.linear x 3                              mojo.linear3 (ttx): one launch
The outputs are compared with fp64 (rel err: max |out - ref| / max |ref|) for both.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import LLAMA3_8B_DIMS, QWEN3_8B_DIMS, TINY_DIMS, bench, print_table, rel_err, versions  # noqa: E402

from mojo_compile.ops.linear import MAX_ROWS  # noqa: E402  (and with it the mojo ops)

mojo = torch.ops.mojo
MODELS = {"llama": LLAMA3_8B_DIMS, "qwen3": QWEN3_8B_DIMS}


def shapes(dims: dict) -> list[tuple[str, str, list[tuple[int, int]]]]:
    """(name, kind, weight shapes [N, K]) of one decoder layer's linears and the LM head."""
    h, i, v = dims["hidden_size"], dims["intermediate_size"], dims["vocab_size"]
    q = dims["num_attention_heads"] * dims.get("head_dim", h // dims["num_attention_heads"])
    kv = dims["num_key_value_heads"] * dims.get("head_dim", h // dims["num_attention_heads"])
    return [("q, k, v", "linear3", [(q, h), (kv, h), (kv, h)]), ("o", "linear", [(h, q)]),
            ("gate + up", "gated", [(i, h), (i, h)]), ("down", "linear", [(h, i)]), ("LM head", "linear", [(v, h)])]


def cublas(kind: str, x, ws):
    if kind == "gated":
        return (F.silu(F.linear(x, ws[0])) * F.linear(x, ws[1]),)
    return tuple(F.linear(x, w) for w in ws)


def fused(kind: str, x, ws, target: str):
    if kind == "gated":
        return (mojo.gated_linear(x, ws[0], ws[1], "silu", target=target),)
    if kind == "linear3":
        return tuple(mojo.linear3(x, *ws, target=target))
    return (mojo.linear(x, ws[0], target=target),)


def reference(kind: str, x, ws):
    x64 = x.double()
    outs = [x64 @ w.double().T for w in ws]
    return (F.silu(outs[0]) * outs[1],) if kind == "gated" else tuple(outs)


def measure(kind: str, weight_shapes, rows: int, args) -> dict:
    gen = torch.Generator(device=args.device).manual_seed(args.seed)
    k = weight_shapes[0][1]
    x = torch.randn(rows, k, device=args.device, dtype=args.dtype, generator=gen)
    layers = [[torch.randn(n, kk, device=args.device, dtype=args.dtype, generator=gen) / kk ** 0.5
               for n, kk in weight_shapes] for _ in range(args.layers)]
    ref = reference(kind, x, layers[0])
    row = dict(rows=rows)
    for impl, fn in (("cublas", lambda ws: cublas(kind, x, ws)), ("mojo", lambda ws: fused(kind, x, ws, args.target))):
        outs = fn(layers[0])
        row[f"{impl}_err"] = max(rel_err(o, r) for o, r in zip(outs, ref))
        if args.device == "cuda":
            row[f"{impl}_us"] = bench(lambda: [fn(ws) for ws in layers], rep_ms=args.rep_ms) / args.layers
    moved = sum(n * kk for n, kk in weight_shapes) * x.element_size()
    for impl in ("cublas", "mojo"):
        if f"{impl}_us" in row:
            row[f"{impl}_tbs"] = moved / (row[f"{impl}_us"] * 1e-6) / 1e12
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="llama,qwen3", help="comma-separated subset of " + ",".join(MODELS))
    p.add_argument("--rows", default="1,2,4", help=f"input rows (batch x tokens) per call, at most {MAX_ROWS} (more "
                                                   f"fall back to torch)")
    p.add_argument("--layers", type=int, default=4, help="weight copies per timed graph (each read once)")
    p.add_argument("--rep-ms", type=int, default=100)
    p.add_argument("--tiny", action="store_true", help="tiny dims, torch target, on the CPU: the plumbing")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="OUT")
    args = p.parse_args()
    args.dtype = torch.bfloat16
    args.target = "torch" if args.tiny or args.device != "cuda" else "ttx"
    rows_list = [int(r) for r in args.rows.split(",")]
    results, table = [], []
    for model in args.model.split(","):
        dims = TINY_DIMS if args.tiny else MODELS[model]
        for name, kind, weight_shapes in shapes(dims):
            for rows in rows_list:
                r = dict(model=model, linear=name, weights=[list(s) for s in weight_shapes],
                         **measure(kind, weight_shapes, rows, args))
                results.append(r)
                cell = (lambda impl: f"{r[impl + '_us']:.1f} ({r[impl + '_tbs']:.2f})" if impl + "_us" in r else "-")
                ratio = f"{r['cublas_us'] / r['mojo_us']:.2f}x" if "mojo_us" in r else "-"
                table.append([model, name, " + ".join(f"{n}x{kk}" for n, kk in weight_shapes), rows,
                              cell("cublas"), cell("mojo"), ratio, f"{r['cublas_err']:.1e}", f"{r['mojo_err']:.1e}"])
    vers = ", ".join(f"{k} {v}" for k, v in versions().items())
    dev = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    print_table(f"### Decode linears, us per layer (TB/s), `python benchmarks/bench_linear.py "
                f"{' '.join(sys.argv[1:])}` -- {datetime.date.today().isoformat()}, {dev} ({vers}); mojo target "
                f"{args.target}",
                ["model", "linear", "weights [N x K]", "rows", "cuBLAS us (TB/s)", "mojo us (TB/s)", "cuBLAS / mojo",
                 "cuBLAS rel err", "mojo rel err"], table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(results=results, versions=versions(), device=dev), f, indent=1)


if __name__ == "__main__":
    main()
