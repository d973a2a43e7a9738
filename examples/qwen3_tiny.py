"""A tiny random-weight Qwen3 compiled with backend="mojo": the report, the difference from eager, timings.

    python examples/qwen3_tiny.py [--device cpu|cuda] [--dtype bfloat16|float32] [--inner inductor|eager]

Runs anywhere: on a GPU the norms run as Triton kernels (target ttx), on a CPU as the torch reference.
"""
import argparse
import time

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

import mojo_compile


def timed(fn, repeat=10):
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeat * 1e3


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--inner", default="inductor", help="inner compiler: inductor or eager")
    args = parser.parse_args()
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=8, num_key_value_heads=4, head_dim=32, rms_norm_eps=1e-6,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2)
    model = Qwen3ForCausalLM(config).to(args.device, getattr(torch, args.dtype)).eval()
    ids = torch.randint(3, 1024, (2, 64), device=args.device)

    compiled = torch.compile(model, backend="mojo", options={"inner_compiler": args.inner})
    with torch.no_grad():
        start = time.perf_counter()
        out = compiled(input_ids=ids).logits
        compile_s = time.perf_counter() - start
        ref = model(input_ids=ids).logits
        print(mojo_compile.last_report())
        print(f"\nmax |compiled - eager| of the logits: {(out.float() - ref.float()).abs().max().item():.3g} "
              f"(logits up to {ref.float().abs().max().item():.3g})")
        print(f"first call (compile) {compile_s:.1f} s; eager {timed(lambda: model(input_ids=ids)):.2f} ms, "
              f"mojo {timed(lambda: compiled(input_ids=ids)):.2f} ms per forward")


if __name__ == "__main__":
    main()
