"""Attention on the GPU: the Triton kernels against torch's SDPA backends, and HF's eager-attention graph compiled
with mojo against Inductor.

    python benchmarks/bench_attention.py [prefill hf decode padded]    (default: all four)

1. prefill B4 S4096 Hq32 Hkv8 D128, causal, bf16: forward and forward + backward of the Mojo op (ttx: its default
   choice, cuDNN here, and our Triton flash kernel forced) against SDPA with cuDNN / flash / efficient, in ms and
   TFLOP/s (causal FLOPs: 2 * 2 * B * Hq * S^2 * D / 2 forward, 2.5x that backward).
2. HF eager attention (causal mask built in the graph from aranges, as HF's mask functions do -> repeat_kv ->
   matmul -> scale -> + mask -> softmax fp32 -> cast -> matmul) as a function: eager / Inductor / mojo (the
   pattern replaced by the op, the mask proven causal and dropped).
3. decode B64, one query against a 4096-key cache (StaticCache-style: positions given), Hq32 Hkv8 D128:
   the split-KV kernel against SDPA with enable_gqa, in us and TB/s of K/V read.
4. padded prefill, the shape of 1. with left padding (the batch's lengths 4096 / 3584 / 3072 / 2048), HF's
   causal + attention_mask: the Mojo op with the structure the mask analysis proves (causal + a [B, 1, 1, S] key
   mask) against the op given the [B, 1, S, S] bool tensor, and SDPA given that tensor after repeat_kv (what HF
   runs under torch.compile in "sdpa" mode). TFLOP/s count the causal FLOPs of the full batch.
Times: medians of triton.testing.do_bench (forward in CUDA graphs where the call is capturable).
"""
from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import bench, print_table, rel_err  # noqa: E402

import mojo_compile  # noqa: E402

mojo = torch.ops.mojo
B, S, HQ, HKV, D = 4, 4096, 32, 8, 128


def repeat_kv(x, n_rep):
    b, h, s, d = x.shape
    return x[:, :, None].expand(b, h, n_rep, s, d).reshape(b, h * n_rep, s, d)


def hf_eager_attention(q, k, v, scale):
    i = torch.arange(q.shape[2], device=q.device)
    mask = torch.where(i[None, :] <= i[:, None], 0.0, torch.finfo(q.dtype).min).to(q.dtype)[None, None]
    k, v = repeat_kv(k, q.shape[1] // k.shape[1]), repeat_kv(v, q.shape[1] // k.shape[1])
    w = torch.matmul(q, k.transpose(2, 3)) * scale + mask
    w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(w, v)


def sdpa_backend(name):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
               "efficient": SDPBackend.EFFICIENT_ATTENTION}[name]

    def run(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return run


def prefill_inputs():
    """q, k, v of the prefill shape (trainable), the default scale and the causal FLOPs of the forward."""
    torch.manual_seed(0)
    q = torch.randn(B, HQ, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(B, HKV, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    return q, k, v, D ** -0.5, 2 * 2 * B * HQ * S * S * D / 2


def prefill(rows):
    q, k, v, scale, flops = prefill_inputs()

    def op(q, k, v):
        return mojo.attention(q, k, v, mask=None, q_pos=None, scale=scale, causal=True, target="ttx")[0]

    impls = {"mojo ttx (default)": op, "mojo triton flash": op}  # the second under MOJO_DETERMINISTIC: our kernels
    for name in ("cudnn", "flash", "efficient"):
        impls[f"sdpa {name}"] = sdpa_backend(name)
    with torch.no_grad():  # fp32 reference (SDPA's memory-efficient fp32 kernel)
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True, enable_gqa=True)
    for name, fn in impls.items():
        if name == "mojo triton flash":
            os.environ["MOJO_DETERMINISTIC"] = "1"  # forward and backward
        try:
            rows.append(time_fwd_bwd(f"prefill B{B} S{S} causal", name, fn, (q, k, v), ref, flops))
        finally:
            os.environ.pop("MOJO_DETERMINISTIC", None)


def time_fwd_bwd(workload, name, fn, inputs, ref, flops, rows_compared=None):
    """A table row: forward and forward + backward times and TFLOP/s (backward = 2.5x the forward's FLOPs) and the
    error against `ref` (on `rows_compared` only, if given); or the failure."""
    try:
        out = fn(*inputs)
        err = rel_err(out, ref) if rows_compared is None else rel_err(out[rows_compared], ref[rows_compared])
        fwd = bench(lambda: fn(*inputs), cudagraph=False)
        dout = torch.randn_like(out)
        train = bench(lambda: torch.autograd.grad(fn(*inputs), inputs, dout), cudagraph=False)
        return [workload, name, f"{fwd / 1e3:.3f}", f"{flops / fwd / 1e6:.0f}", f"{train / 1e3:.3f}",
                f"{3.5 * flops / train / 1e6:.0f}", f"{err:.1e}"]
    except Exception as e:
        return [workload, name, "failed", "", "", "", f"{type(e).__name__}: {e}"[:60]]


def hf_graph(rows):
    torch.manual_seed(0)
    q = torch.randn(B, HQ, S, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, HKV, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    flops = 2 * 2 * B * HQ * S * S * D / 2
    exact = hf_eager_attention(q.float(), k.float(), v.float(), D ** -0.5)
    mojo_compile.reset_report()
    impls = {"eager": hf_eager_attention, "inductor": torch.compile(hf_eager_attention, dynamic=False),
             "mojo": torch.compile(hf_eager_attention, backend="mojo", dynamic=False)}
    for name, fn in impls.items():
        try:
            with torch.no_grad():
                out = fn(q, k, v, D ** -0.5)
                t = bench(lambda: fn(q, k, v, D ** -0.5), cudagraph=False)
            rows.append(["HF eager attention graph", name, f"{t / 1e3:.3f}", f"{flops / t / 1e6:.0f}", "", "",
                         f"{rel_err(out, exact):.1e}"])
        except Exception as e:
            rows.append(["HF eager attention graph", name, "failed", "", "", "", f"{type(e).__name__}: {e}"[:60]])
    print(mojo_compile.last_report().table())


def decode(rows):
    torch.manual_seed(0)
    batch, ctx = 64, 4096
    q = torch.randn(batch, HQ, 1, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(batch, HKV, ctx, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    pos = torch.tensor([ctx - 1], device="cuda")
    kv_bytes = 2 * batch * HKV * ctx * D * 2
    impls = {
        "mojo ttx (split-KV)": lambda: mojo.attention(q, k, v, mask=None, q_pos=pos, scale=D ** -0.5, causal=True,
                                                      target="ttx")[0],
        "sdpa enable_gqa": lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
        "sdpa + repeat_kv": lambda: F.scaled_dot_product_attention(q, repeat_kv(k, HQ // HKV), repeat_kv(v, HQ // HKV)),
    }
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True)
    for name, fn in impls.items():
        try:
            out = fn()
            t = bench(fn)
            rows.append([f"decode B{batch} ctx{ctx}", name, f"{t:.1f} us", "", "", f"{kv_bytes / t / 1e6:.2f} TB/s",
                         f"{rel_err(out, ref):.1e}"])
        except Exception as e:
            rows.append([f"decode B{batch} ctx{ctx}", name, "failed", "", "", "", f"{type(e).__name__}: {e}"[:60]])


def padded_prefill(rows):
    q, k, v, scale, flops = prefill_inputs()
    lengths = torch.tensor([S, S - 512, S - 1024, S // 2], device="cuda")
    keys = torch.arange(S, device="cuda")[None, :] >= (S - lengths)[:, None]  # left padding: [B, S]
    causal = torch.ones(S, S, dtype=torch.bool, device="cuda").tril()
    full = causal[None, None] & keys[:, None, None, :]  # what HF builds: [B, 1, S, S]
    impls = {
        "mojo: causal + key padding": lambda q, k, v: mojo.attention(
            q, k, v, mask=keys[:, None, None, :], q_pos=None, scale=scale, causal=True, target="ttx")[0],
        "mojo: S x S bool tensor": lambda q, k, v: mojo.attention(
            q, k, v, mask=full, q_pos=None, scale=scale, causal=False, target="ttx")[0],
        "sdpa: S x S tensor, repeat_kv": lambda q, k, v: F.scaled_dot_product_attention(
            q, repeat_kv(k, HQ // HKV), repeat_kv(v, HQ // HKV), attn_mask=full, scale=scale),
    }
    real = keys[:, None, :, None].expand(B, HQ, S, D)  # rows of real tokens (padded rows: 0 here, NaN in some SDPAs)
    with torch.no_grad():
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=full, scale=scale,
                                             enable_gqa=True)
    for name, fn in impls.items():
        rows.append(time_fwd_bwd(f"padded prefill B{B} S{S}", name, fn, (q, k, v), ref, flops, real))


def main():
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}")
    rows = []
    sections = {"prefill": prefill, "hf": hf_graph, "decode": decode, "padded": padded_prefill}
    for name in sys.argv[1:] or sections:  # e.g. `bench_attention.py decode padded`: those sections only
        sections[name](rows)
    print_table("attention (ms unless stated; TFLOP/s)", ["workload", "impl", "fwd", "fwd TFLOP/s", "fwd+bwd",
                                                          "fwd+bwd TFLOP/s or BW", "rel err"], rows)


if __name__ == "__main__":
    main()
