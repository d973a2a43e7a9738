"""A 4-layer Qwen3 of Qwen3-8B dimensions on the GPU: eager / Inductor / Liger / mojo, side by side.

    python benchmarks/bench_model.py [--only prefill,train,decode]

hidden 4096, intermediate 12288, 32/8 heads, head_dim 128, vocab 32000, random weights, bf16, SDPA attention.
  prefill  one forward of 1x4096 tokens, no cache, no grad
  train    forward + backward of 1x4096 tokens with the loss on the logits (no optimizer step); peak memory
  decode   `generate` batch 1 with a StaticCache, per new token: (t(65 new) - t(1 new)) / 64. Inductor and mojo use
           HF's CompileConfig (mode="reduce-overhead", i.e. CUDA graphs); eager runs with disable_compile=True.
Liger is `apply_liger_kernel_to_qwen3` on an eager model (its RMSNorm, RoPE, SwiGLU; fused linear cross-entropy in
train). Times are medians of triton.testing.do_bench, in milliseconds; compile time is the first call.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import print_table  # noqa: E402

import mojo_compile  # noqa: E402

SEQ = 4096


def build(seed=0):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(vocab_size=32000, hidden_size=4096, intermediate_size=12288, num_hidden_layers=4,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=8192,
                         rms_norm_eps=1e-6, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    with torch.device("cuda"):  # initialised on the GPU: seconds, not a minute per model
        model = Qwen3ForCausalLM(config).to(dtype=torch.bfloat16)
    model.set_attn_implementation("sdpa")
    return model


def ms(fn, rep=200):
    import triton.testing as tt
    return tt.do_bench(fn, rep=rep, return_mode="median")


def first_call(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, time.perf_counter() - t


def variants(task):
    """name -> model wrapper, each on a fresh model with the same weights."""
    def eager():
        return build()

    def inductor():
        return torch.compile(build())

    def mojo():
        return torch.compile(build(), backend="mojo")

    def liger():
        from liger_kernel.transformers import apply_liger_kernel_to_qwen3
        model = build()
        apply_liger_kernel_to_qwen3(rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
                                    fused_linear_cross_entropy=task == "train", model=model)
        return model

    chosen = os.environ.get("BENCH_IMPLS", "eager,inductor,mojo,liger").split(",")
    return {name: make for name, make in {"eager": eager, "inductor": inductor, "mojo": mojo, "liger": liger}.items()
            if name in chosen}  # Liger last: it patches HF globally


def bench_prefill(rows):
    ids = torch.randint(3, 32000, (1, SEQ), device="cuda")
    ref = None
    for name, make in variants("prefill").items():
        model = None
        try:
            model = make()
            with torch.no_grad():
                out, compile_s = first_call(lambda: model(input_ids=ids, use_cache=False).logits)
                ref = out if ref is None else ref
                err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
                t = ms(lambda: model(input_ids=ids, use_cache=False))
            rows.append(["prefill 1x4096", name, f"{t:.2f}", f"{compile_s:.1f}", "", f"{err:.1e}"])
        except Exception as e:
            rows.append(["prefill 1x4096", name, "failed", "", "", f"{type(e).__name__}: {str(e)[:60]}"])
        finally:
            model = None
            torch.cuda.empty_cache()
        if name == "mojo":
            print(mojo_compile.last_report().table().splitlines()[0])


def bench_train(rows):
    ids = torch.randint(3, 32000, (1, SEQ), device="cuda")
    for name, make in variants("train").items():
        model = None
        try:
            model = make()

            def step():
                loss = model(input_ids=ids, labels=ids).loss
                loss.backward()
                return loss

            torch.cuda.reset_peak_memory_stats()
            loss, compile_s = first_call(step)
            t = ms(step, rep=300)
            peak = torch.cuda.max_memory_allocated() / 2 ** 30
            rows.append(["train step 1x4096", name, f"{t:.2f}", f"{compile_s:.1f}", f"{peak:.1f} GiB",
                         f"loss {loss.item():.4f}"])
        except Exception as e:
            rows.append(["train step 1x4096", name, "failed", "", "", f"{type(e).__name__}: {str(e)[:60]}"])
        finally:
            model = None
            torch.cuda.empty_cache()


def bench_decode(rows):
    from transformers import CompileConfig

    prompt = torch.randint(3, 32000, (1, 128), device="cuda")
    configs = {"eager": None, "inductor": CompileConfig(), "liger": None,
               "mojo": CompileConfig(backend="mojo", mode="reduce-overhead")}
    tokens = {}
    for name, make in variants("decode").items():
        model = None
        try:
            base = build() if name in ("inductor", "mojo") else make()  # generate compiles the decode step itself
            model = base
            kwargs = dict(do_sample=False, cache_implementation="static", pad_token_id=0)
            if configs[name] is None:
                kwargs["disable_compile"] = True
            else:
                kwargs["compile_config"] = configs[name]

            def gen(n):
                return model.generate(prompt, max_new_tokens=n, min_new_tokens=n, **kwargs)

            out, compile_s = first_call(lambda: gen(65))
            tokens[name] = out[0, 128:].tolist()
            t1 = ms(lambda: gen(1), rep=500)
            t65 = ms(lambda: gen(65), rep=2000)
            same = "same tokens as eager" if tokens[name] == tokens.get("eager", tokens[name]) else "tokens differ"
            rows.append(["decode per token", name, f"{(t65 - t1) / 64:.3f}", f"{compile_s:.1f}", "", same])
        except Exception as e:
            rows.append(["decode per token", name, "failed", "", "", f"{type(e).__name__}: {str(e)[:60]}"])
        finally:
            model = None
            torch.cuda.empty_cache()


def main():
    """Each workload runs in its own process: Liger's patches of the HF modules are global and must not leak."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="prefill,train,decode")
    parser.add_argument("--impls", help="comma-separated subset of eager,inductor,mojo,liger")
    parser.add_argument("--task", help=argparse.SUPPRESS)  # the child process of one workload
    args = parser.parse_args()
    if args.impls:
        os.environ["BENCH_IMPLS"] = args.impls  # read by the child processes
    if args.task:
        rows = []
        {"prefill": bench_prefill, "train": bench_train, "decode": bench_decode}[args.task](rows)
        print("ROWS " + json.dumps(rows))
        return
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}")
    rows = []
    for task in args.only.split(","):
        child = subprocess.run([sys.executable, __file__, "--task", task], capture_output=True, text=True)
        found = [line for line in child.stdout.splitlines() if line.startswith("ROWS ")]
        print("\n".join(line for line in child.stdout.splitlines() if not line.startswith("ROWS ")))
        if not found:
            print(child.stderr[-3000:])
            rows.append([task, "all", "failed", "", "", f"exit {child.returncode}"])
        else:
            rows.extend(json.loads(found[-1][5:]))
        print_table("Qwen3 4 layers, Qwen3-8B dims (ms)", ["workload", "impl", "time", "compile s", "memory",
                                                          "check"], rows)


if __name__ == "__main__":
    main()
