"""Which kernel computes an attention call on the ttx target, forward and backward: our Triton flash kernel, our
split-KV (Flash-Decoding) kernel for few query rows, or torch's fused CUDA kernels (cuDNN, FlashAttention-2) where
they compute the call exactly. A heuristic by default; MOJO_TUNE=1 times the candidates and keeps the fastest per
shape bucket (tuner.py); MOJO_DETERMINISTIC keeps our kernels (no atomics in their backward)."""
from __future__ import annotations

import functools

import torch

from .. import tuner
from ..kernels import attention as attn_kernels
from ..kernels import attention_decode as attn_decode_kernels
from . import log_once


DECODE_MAX_QUERIES = 16  # up to this many query rows the heuristic takes split-KV (Flash-Decoding) over the keys
TUNE_MAX_QUERIES = 64  # up to this many the tuner also times split-KV (more rows re-read K/V per row chunk)
DETERMINISTIC_KERNELS = {"flash", "split_kv"}  # ours: no atomics in the backward
SDPA_KERNELS = ("sdpa_cudnn", "sdpa_flash")


def sdpa_reason(q, k, v, mask, q_pos, scale, causal, window, softcap, sinks):
    """Why torch's fused CUDA kernels (cuDNN, FlashAttention-2) cannot compute this call exactly; None if they can.
    They take no mask tensor, positions, window, softcap or sinks, and align causal top-left: the same as the
    op's bottom-right only when Sq == Skv."""
    if q.device.type != "cuda" or q.dtype not in (torch.float16, torch.bfloat16):
        return "not a CUDA fp16/bf16 call"
    if mask is not None or q_pos is not None or window or softcap or sinks is not None:
        return "a mask tensor, positions, a window, softcap or sinks"
    if not _static(q, k, v):
        return "symbolic sizes"
    if q.numel() == 0 or k.numel() == 0:
        return "empty inputs"
    if causal and q.shape[2] != k.shape[2]:
        return "causal with Sq != Skv"
    if q.shape[-1] > 128 or q.shape[-1] % 8 or v.shape[-1] != q.shape[-1] or q.shape[1] % k.shape[1]:
        return f"head dims {q.shape[-1]}/{v.shape[-1]}, heads {q.shape[1]}/{k.shape[1]}"
    return None


def sdpa_forward(kernel, q, k, v, scale, causal):
    """(out, lse) from torch's private SDPA forward ops (they return the row log-sum-exp the op owes; GQA native).
    If torch refuses the call, our flash kernel computes it, with the reason logged once."""
    aten = torch.ops.aten
    try:
        if kernel == "sdpa_cudnn":
            out, lse = aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False,
                                                                scale=scale)[:2]
        else:
            out, lse = aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)[:2]
    except (RuntimeError, TypeError) as e:
        log_once(f"mojo attention: torch's {kernel} forward refused the call ({type(e).__name__}: {e}); "
                  "the Triton kernel computes it")
        return attn_kernels.attention_fwd(q, k, v, scale, causal=causal)
    return out.contiguous(), lse.reshape(q.shape[:3]).float()  # the op's layout: contiguous out, [B, Hq, Sq] lse


def sdpa_backward(kernel, grad_out, q, k, v, out, lse, scale, causal):
    """The same backend's backward op, from the forward's output and lse (dropout 0: no RNG state is read, so its
    seed / offset are placeholders; dense inputs: no cumulative sequence lengths). If torch refuses the call, our
    Triton backward computes the same gradients from the same (out, lse), with the reason logged once."""
    aten = torch.ops.aten
    s_q, s_kv = q.shape[2], k.shape[2]
    grad_out = grad_out.contiguous()
    try:
        if kernel == "sdpa_cudnn":
            seed, offset = (torch.zeros((), dtype=torch.int64, device=q.device) for _ in range(2))
            grads = aten._scaled_dot_product_cudnn_attention_backward(
                grad_out, q, k, v, out, lse.unsqueeze(-1), seed, offset, None, None, None, s_q, s_kv, 0.0, causal,
                scale=scale)
        else:
            seed, offset = torch.zeros(2, dtype=torch.int64, device=q.device), torch.zeros((), dtype=torch.int64,
                                                                                            device=q.device)
            grads = aten._scaled_dot_product_flash_attention_backward(
                grad_out, q, k, v, out, lse, None, None, s_q, s_kv, 0.0, causal, seed, offset, scale=scale)
    except (RuntimeError, TypeError) as e:
        log_once(f"mojo attention: torch's {kernel} backward refused the call ({type(e).__name__}: {e}); "
                  "the Triton backward computes it")
        return attn_kernels.attention_bwd(grad_out, q, k, v, out, lse, scale, causal=causal)[:3]
    return [g.contiguous() for g in grads[:3]]  # the fake impl's layout


def run_forward(kernel, q, k, v, mask, q_pos, scale, causal, window, softcap, sinks):
    """The forward of the named kernel: (out, lse)."""
    if kernel == "flash":
        return attn_kernels.attention_fwd(q, k, v, scale, causal=causal, window=window, softcap=softcap, q_pos=q_pos,
                                          mask=mask, sinks=sinks)
    if kernel == "split_kv":
        return attn_decode_kernels.attention_decode(q, k, v, scale, causal=causal, window=window, softcap=softcap,
                                                    q_pos=q_pos, mask=mask, sinks=sinks)
    return sdpa_forward(kernel, q, k, v, scale, causal)


def candidates(q, sdpa_ok: bool) -> list[str]:
    """The kernels that compute a call: ours always, split-KV for few query rows, torch's where exact."""
    few_rows = isinstance(q.shape[2], int) and q.shape[2] <= TUNE_MAX_QUERIES
    return ["flash"] + (["split_kv"] if few_rows else []) + (list(SDPA_KERNELS) if sdpa_ok else [])


def _static(*tensors) -> bool:
    return all(isinstance(s, int) for t in tensors if t is not None for s in t.shape)


def cudnn_available() -> bool:
    return torch.backends.cuda.cudnn_sdp_enabled() and torch.backends.cudnn.is_available()


def forward_choice(q, k, v, mask, q_pos, scale, causal, window, softcap, sinks) -> str:
    """The forward kernel for this call. Heuristic: split-KV for a few query rows; cuDNN where it computes the call
    exactly (measured on the H200: 1.3x our forward, 2.3x our backward) unless MOJO_DETERMINISTIC; else our flash
    kernel. MOJO_TUNE=1 times the forwards instead and keeps the fastest per shape bucket; the backward is chosen
    on its own (backward_choice): every candidate returns the same (out, natural-log lse)."""
    sq = q.shape[2]
    sdpa_ok = sdpa_reason(q, k, v, mask, q_pos, scale, causal, window, softcap, sinks) is None
    if isinstance(sq, int) and sq <= DECODE_MAX_QUERIES:
        choice = "split_kv"
    elif sdpa_ok and cudnn_available() and not tuner.deterministic_only():
        choice = "sdpa_cudnn"
    else:
        choice = "flash"
    if tuner.enabled() and _static(q, k, v, mask, q_pos, sinks):
        key = tuner.bucket(*q.shape, k.shape[1], k.shape[2], q.dtype, mask is not None, causal, window > 0,
                           softcap > 0, sinks is not None, q_pos is not None)
        with tuner.real_tensors():  # time the kernels on fresh inputs (q, k, v may be fake while Inductor traces)
            fresh = [tuner.like(t) for t in (q, k, v, mask)]
            positions = None if q_pos is None else torch.arange(k.shape[2] - sq, k.shape[2], device=q.device)
            args = (*fresh, positions, scale, causal, window, softcap, tuner.like(sinks))
            timed = {name: functools.partial(run_forward, name, *args) for name in candidates(q, sdpa_ok)}
            choice = tuner.choose("attention", key, timed, choice, q.device.type, DETERMINISTIC_KERNELS)
    return choice


def backward_choice(q, k, v, mask, q_pos, scale, causal, window, softcap, sinks) -> str:
    """The backward kernel, chosen on its own: any backward is right with any forward's (out, lse). Heuristic: the
    backward of the forward's SDPA backend if it took one, else ours ("flash"). MOJO_TUNE=1 times the backwards
    themselves where torch's compute the call exactly (training pays for them, not for the forwards), from one
    (out, lse) of our forward, and keeps the fastest under its own key."""
    forward = forward_choice(q, k, v, mask, q_pos, scale, causal, window, softcap, sinks)
    choice = forward if forward in SDPA_KERNELS else "flash"
    if tuner.enabled() and sdpa_reason(q, k, v, mask, q_pos, scale, causal, window, softcap, sinks) is None:
        key = tuner.bucket(*q.shape, k.shape[1], k.shape[2], q.dtype, causal)
        with tuner.real_tensors():
            fresh_q, fresh_k, fresh_v = (tuner.like(t) for t in (q, k, v))
            out, lse = attn_kernels.attention_fwd(fresh_q, fresh_k, fresh_v, scale, causal=causal)
            args = (tuner.like(out), fresh_q, fresh_k, fresh_v, out, lse, scale, causal)
            timed = {"flash": functools.partial(attn_kernels.attention_bwd, *args)}
            timed.update({name: functools.partial(sdpa_backward, name, *args) for name in SDPA_KERNELS})
            choice = tuner.choose("attention_backward", key, timed, choice, q.device.type, DETERMINISTIC_KERNELS)
    return choice


KERNEL_NAMES = {"flash": "Triton flash", "split_kv": "Triton split-KV", "sdpa_cudnn": "cuDNN (torch)",
                "sdpa_flash": "FlashAttention-2 (torch)"}
