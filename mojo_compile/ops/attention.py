"""Attention as a Mojo op: `mojo::attention(q, k, v, ...)` -> (out, lse), GQA read natively (no repeat_kv copy).

    q [B, Hq, Sq, D], k / v [B, Hkv, Skv, D], Hq % Hkv == 0: q head h reads kv head h // (Hq // Hkv)
    s = (q . k) * scale                       fp32
    s = softcap * tanh(s / softcap)           softcap > 0 (Gemma2)
    s = s + mask   / s[~mask] = -inf          mask: additive float or bool (True = attend), broadcastable to
                                              [B, Hq, Sq, Skv]
    structural masking: key j (position j) is allowed for query row i iff j <= q_pos[i] (causal) and
                        j > q_pos[i] - window (window > 0); q_pos None = bottom-right: q_pos[i] = Skv - Sq + i
    p = softmax over the allowed keys and, per head, one sink logit (gpt-oss) that takes probability but no value
    out = p @ v (q's dtype); lse = log-sum-exp of the row (fp32), what the backward needs

A row with no allowed key and no sink gives out = 0, lse = -inf. The mask analysis (patterns/mask_analysis.py) gives
the kernel the structure (causal, window) instead of an S x S tensor wherever it proves the graph's mask is exactly
that; otherwise the tensor is passed.

Implementations, registered below the op (docs/adding-a-fusion.md):
  torch      fp32 scores and softmax (torch's own CPU flash kernel for the plain cases on the CPU); the backward
             from recomputed probabilities, in fp32.
  ttx        the kernel lowering/attention_choice.py picks: ours (kernels/attention*.py) or torch's SDPA kernels.
  torch_npu  npu_fused_infer_attention_score (below); the backward on the torch reference.
"""
from __future__ import annotations

import functools
from typing import Optional

import torch
from torch import Tensor
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .. import lowering, sharding
from ..kernels.common import FLOAT_DTYPES, ttx_device_reason, ttx_elementwise_reason, ttx_traceable
from ..lowering.reference import differentiable_grads


def _check(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], target: str) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"mojo attention: q, k, v must be [B, H, S, D], got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if k.shape != v.shape[:-1] + k.shape[-1:] or q.shape[-1] != k.shape[-1] or q.shape[0] != k.shape[0] \
            or q.shape[1] % k.shape[1]:
        raise ValueError(f"mojo attention: q {tuple(q.shape)} and k/v {tuple(k.shape)}/{tuple(v.shape)} do not "
                         f"form a (grouped-query) attention")
    full = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    if mask is not None and (mask.dim() > 4 or any(m not in (1, f) for m, f in zip(reversed(mask.shape),
                                                                                   reversed(full)))):
        raise ValueError(f"mojo attention: mask {tuple(mask.shape)} does not broadcast to [B, Hq, Sq, Skv] = {full}")
    lowering.check_target_name(target)


@torch.library.custom_op("mojo::attention", mutates_args=())
def attention(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], q_pos: Optional[Tensor], scale: float,
              causal: bool = False, window: int = 0, softcap: float = 0.0, sinks: Optional[Tensor] = None,
              target: str = "torch") -> tuple[Tensor, Tensor]:
    """(out [B, Hq, Sq, Dv] in q's dtype, lse [B, Hq, Sq] fp32)."""
    _check(q, k, v, mask, target)
    return lowering.call("attention", target, q, k, v, mask, q_pos, scale, causal, window, softcap, sinks)


@attention.register_fake
def _(q, k, v, mask, q_pos, scale, causal=False, window=0, softcap=0.0, sinks=None, target="torch"):
    b, h, s, _ = q.shape
    return q.new_empty((b, h, s, v.shape[-1])), q.new_empty((b, h, s), dtype=torch.float32)


@torch.library.custom_op("mojo::attention_backward", mutates_args=())
def attention_backward(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                       mask: Optional[Tensor], q_pos: Optional[Tensor], scale: float, causal: bool, window: int,
                       softcap: float, sinks: Optional[Tensor], target: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(grad_q, grad_k, grad_v, grad_sinks -- empty without sinks)."""
    _check(q, k, v, mask, target)
    return lowering.call("attention_backward", target, grad_out, q, k, v, out, lse, mask, q_pos, scale, causal,
                         window, softcap, sinks)


@attention_backward.register_fake
def _(grad_out, q, k, v, out, lse, mask, q_pos, scale, causal, window, softcap, sinks, target):
    grad_sinks = sinks.new_empty(sinks.shape) if sinks is not None else q.new_empty((0,))
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), grad_sinks


def _setup(ctx, inputs, output):
    q, k, v, mask, q_pos, scale, causal, window, softcap, sinks, target = inputs
    if mask is not None and mask.requires_grad:  # the backward gives the mask none: refuse a silent zero
        raise RuntimeError("mojo attention: the mask takes no gradient here; detach it, or leave this site unfused")
    ctx.save_for_backward(q, k, v, output[0], output[1], mask, q_pos, sinks)
    ctx.params = (scale, causal, window, softcap, target)


def _backward(ctx, grad_out, _grad_lse):
    q, k, v, out, lse, mask, q_pos, sinks = ctx.saved_tensors
    scale, causal, window, softcap, target = ctx.params
    if torch.is_grad_enabled():  # create_graph=True (eager autograd; AOTAutograd traces backwards without it)
        # differentiable gradients, for a second-order gradient: autograd through the fp32 reference (scores,
        # softmax, p @ v) recomputed on the saved q, k, v and sinks (reference.differentiable_grads); the gradient
        # reaching lse is ignored, as below
        def forward(q, k, v, sinks):
            p, _, _ = _attention_probs(q, k, mask, q_pos, scale, causal, window, softcap, sinks, differentiable=True)
            return ((p @ _grouped(v, q.shape[1]).float()).to(q.dtype),)

        # (each input that requires a gradient gets one: needs_input_grad stops at the arguments given)
        dq, dk, dv, dsinks = differentiable_grads(forward, (q, k, v, sinks), (True,) * 4, (grad_out,))
        return dq, dk, dv, None, None, None, None, None, None, dsinks, None
    dq, dk, dv, dsinks = attention_backward(grad_out, q, k, v, out, lse, mask, q_pos, scale, causal, window, softcap,
                                            sinks, target)
    return dq, dk, dv, None, None, None, None, None, None, (dsinks if sinks is not None else None), None


attention.register_autograd(_backward, setup_context=_setup)


def _register_autocast(op_def, device_type: str) -> None:
    """Under torch.autocast the spellings this op replaces compute in the autocast dtype: SDPA and matmul are on
    autocast's lower-precision list, so q, k and v are cast to that dtype first and the output has it. Do the same
    (with the dtype of the autocast region in force, which torch.library.register_autocast cannot: it takes one
    fixed dtype). The mask and sinks keep their dtype (the eager spelling adds an fp32 mask to the scores)."""
    if not torch._C._is_autocast_available(device_type):
        return
    key = "Autocast" + torch._C._dispatch_key_for_device(device_type)
    keyset = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key))

    def kernel(_keyset, q, k, v, *rest):
        dtype = torch.get_autocast_dtype(device_type)

        def cast(t):
            return t.to(dtype) if t.is_floating_point() and t.device.type == device_type else t

        with torch._C._ExcludeDispatchKeyGuard(keyset):
            return op_def._opoverload(cast(q), cast(k), cast(v), *rest)

    op_def._lib.impl(op_def._name, kernel, key, with_keyset=True)


for _device_type in ("cuda", "cpu"):
    _register_autocast(attention, _device_type)

for _op, _name in ((attention, "attention"), (attention_backward, "attention_backward")):
    lowering.inline_in_inner_compiler(_op, _name)


# ------------------------------------------------------------------------------------------------ target: torch
def _grouped(t, heads):
    """kv [B, Hkv, S, D] -> [B, Hq, S, D] (q head h reads kv head h // group), as repeat_kv does."""
    return t.repeat_interleave(heads // t.shape[1], dim=1) if t.shape[1] != heads else t


def structural_mask(q, k, q_pos, causal, window):
    """The keys each query may attend by the op's structure, [Sq, Skv] bool (None when there is none)."""
    if not causal and not window:
        return None
    sq, skv = q.shape[2], k.shape[2]
    rows = q_pos.to(torch.long) if q_pos is not None else torch.arange(skv - sq, skv, device=q.device)
    cols = torch.arange(skv, device=q.device)
    allowed = cols[None, :] <= rows[:, None] if causal else torch.ones(sq, skv, dtype=torch.bool, device=q.device)
    if window:
        allowed = allowed & (cols[None, :] > rows[:, None] - window)
    return allowed


def _attention_probs(q, k, mask, q_pos, scale, causal, window, softcap, sinks, differentiable=False):
    """fp32 scores -> (p over the keys, lse, tanh of the softcap or None). `differentiable`: a row with nothing
    allowed takes no NaN into autograd's graph (its softmax's NaN would reach q and k through an additive -inf
    mask's backward): for the second-order path, which differentiates this."""
    s = q.float() @ _grouped(k, q.shape[1]).float().transpose(-1, -2) * scale
    t = None
    if softcap:
        t = torch.tanh(s / softcap)
        s = softcap * t
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask.float()
    allowed = structural_mask(q, k, q_pos, causal, window)
    if allowed is not None:
        s = s.masked_fill(~allowed, float("-inf"))
    logits = s if sinks is None else torch.cat([s, sinks.float().view(1, -1, 1, 1).expand(*s.shape[:-1], 1)], -1)
    lse = torch.logsumexp(logits, dim=-1)
    if differentiable:  # the row's p is 0 below whatever its logits: 0s instead of -inf, and no gradient
        logits = logits.masked_fill(torch.isneginf(lse).unsqueeze(-1), 0.0)
    # softmax, not exp(s - lse): a row an additive mask fills with finfo.min has lse = finfo.min, which has lost
    # its log(n) to rounding -- eager's softmax gives that row 1/n per key. A row with nothing allowed (lse -inf):
    # p = 0, the op's contract. Only that row: a NaN score (NaN in q or k) stays NaN, as in eager.
    p = torch.softmax(logits, dim=-1)[..., :s.shape[-1]]
    p = torch.where(torch.isneginf(lse).unsqueeze(-1), 0.0, p)
    return p, lse, t


def _cpu_flash_applies(q, k, v, mask, q_pos, causal, window, softcap, sinks) -> bool:
    """On a CPU, torch's own flash kernel (which returns the log-sum-exp too) computes the plain cases: no mask tensor
    (its fully masked rows differ from eager's), no softcap / sinks / window, causal only when square (static). Not
    an empty query or key sequence: that kernel divides by zero there (SIGFPE, the process dies), and eager's SDPA
    never sends it one; the fp32 path gives the empty output / zeros. Not q, k or v with a last stride other than 1
    (a transposed view): the kernel assumes unit stride there (eager's SDPA makes it so first) and reads wrong
    values."""
    if q.device.type != "cpu" or mask is not None or q_pos is not None or window or softcap or sinks is not None:
        return False
    if any(t.dim() and not statically_known_true(t.stride(-1) == 1) for t in (q, k, v)):
        return False
    # (traced with symbolic sizes too: a size not known to be non-zero takes the fp32 path, and adds no guard)
    if not all(statically_known_true(n != 0) for n in (q.numel(), k.numel())):
        return False
    sq, skv = q.shape[2], k.shape[2]
    return not causal or (isinstance(sq, int) and isinstance(skv, int) and sq == skv)


def reference(q, k, v, mask, q_pos, scale, causal, window, softcap, sinks):
    if _cpu_flash_applies(q, k, v, mask, q_pos, causal, window, softcap, sinks):
        heads = q.shape[1]
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, _grouped(k, heads), _grouped(v, heads), 0.0, causal, scale=scale)
        return out.contiguous(), lse.contiguous()  # the fake impl's (and every target's) layout
    p, lse, _ = _attention_probs(q, k, mask, q_pos, scale, causal, window, softcap, sinks)
    out = p @ _grouped(v, q.shape[1]).float()
    return out.to(q.dtype), lse


def _ungroup(t, kv_heads):
    """[B, Hq, S, D] gradients -> [B, Hkv, S, D]: the sum over each kv head's group of q heads."""
    b, h, s, d = t.shape
    return t.view(b, kv_heads, h // kv_heads, s, d).sum(2) if h != kv_heads else t


def reference_backward(grad_out, q, k, v, out, lse, mask, q_pos, scale, causal, window, softcap, sinks):
    """The standard attention backward, in fp32, from recomputed probabilities."""
    p, _, t = _attention_probs(q, k, mask, q_pos, scale, causal, window, softcap, sinks)
    do = grad_out.float()
    vv = _grouped(v, q.shape[1]).float()
    grad_v = p.transpose(-1, -2) @ do
    dp = do @ vv.transpose(-1, -2)
    delta = (do * out.float()).sum(-1, keepdim=True)  # = rowsum(p * dp): the sink takes no value
    ds = p * (dp - delta)
    if t is not None:
        ds = ds * (1 - t * t)
    grad_q = ds @ _grouped(k, q.shape[1]).float() * scale
    grad_k = ds.transpose(-1, -2) @ q.float() * scale
    if sinks is not None:
        p_sink = torch.exp(sinks.float().view(1, -1, 1) - lse).nan_to_num(0.0)
        grad_sinks = -(p_sink * delta.squeeze(-1)).sum((0, 2)).to(sinks.dtype)
    else:
        grad_sinks = q.new_empty((0,))
    return (grad_q.to(q.dtype), _ungroup(grad_k, k.shape[1]).to(k.dtype), _ungroup(grad_v, v.shape[1]).to(v.dtype),
            grad_sinks)


lowering.register_impl("attention", "torch", reference, **lowering.TRACEABLE)
lowering.register_impl("attention_backward", "torch", reference_backward, **lowering.TRACEABLE)


# -------------------------------------------------------------------------------------------------- target: ttx
def _choice():
    """lowering/attention_choice.py, the policy that picks the kernel (ours or torch's SDPA kernels), imported on
    first use: it imports the Triton kernels."""
    from ..lowering import attention_choice
    return attention_choice


def _ttx_reason(q, k, v, mask, q_pos, sinks):
    reason = ttx_device_reason(q)
    if reason:
        return reason
    if q.dtype not in FLOAT_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        return f"q/k/v dtypes {q.dtype}/{k.dtype}/{v.dtype} are not one of fp16/bf16/fp32"
    if any(t.stride(-1) != 1 for t in (q, k, v)):
        return "q, k or v is strided in the head dim"
    if q.shape[-1] > 256 or v.shape[-1] != q.shape[-1]:
        return f"head dims {q.shape[-1]}/{v.shape[-1]}: the kernels take equal head dims up to 256"
    if mask is not None and (mask.dim() > 4 or not (mask.dtype == torch.bool or mask.dtype.is_floating_point)):
        return f"mask {mask.dtype} {tuple(mask.shape)} is not a bool / float tensor of at most 4 dims"
    if q_pos is not None and (q_pos.dtype.is_floating_point or q_pos.dim() != 1 or q_pos.shape[0] != q.shape[2]):
        return f"q_pos {q_pos.dtype} {tuple(q_pos.shape)} is not one integer position per query row"
    if q.shape[0] > 65535 or k.shape[1] > 65535:
        return "batch or kv heads beyond the kernels' grid limit (65535)"
    return None


def _supports_attention(q, k, v, mask, q_pos, scale, causal, window, softcap, sinks):
    return _ttx_reason(q, k, v, mask, q_pos, sinks)


def _supports_attention_backward(grad_out, q, k, v, out, lse, mask, q_pos, scale, causal, window, softcap, sinks):
    return _ttx_reason(q, k, v, mask, q_pos, sinks) or ttx_elementwise_reason(grad_out, out)


def ttx_forward(q, k, v, mask, q_pos, scale, causal, window, softcap, sinks):
    attn_choice = _choice()
    choice = attn_choice.forward_choice(q, k, v, mask, q_pos, scale, causal, window, softcap, sinks)
    return attn_choice.run_forward(choice, q, k, v, mask, q_pos, scale, causal, window, softcap, sinks)


def ttx_backward(grad_out, q, k, v, out, lse, mask, q_pos, scale, causal, window, softcap, sinks):
    from ..kernels import attention as attn_kernels

    attn_choice = _choice()
    choice = attn_choice.backward_choice(q, k, v, mask, q_pos, scale, causal, window, softcap, sinks)
    if choice in attn_choice.SDPA_KERNELS:
        dq, dk, dv = attn_choice.sdpa_backward(choice, grad_out, q, k, v, out, lse, scale, causal)
        return dq, dk, dv, q.new_empty((0,))
    dq, dk, dv, dsinks = attn_kernels.attention_bwd(grad_out, q, k, v, out, lse, scale, causal=causal, window=window,
                                                    softcap=softcap, q_pos=q_pos, mask=mask, sinks=sinks)
    return dq, dk, dv, (dsinks if dsinks is not None else q.new_empty((0,)))


def _traceable_attention(q, k, v, mask, q_pos, scale, causal, window, softcap, sinks):
    """Our kernels inline into Inductor's graph; torch's SDPA kernels are called from the op, opaque (so that a
    backward torch refuses can still fall back to ours)."""
    attn_choice = _choice()
    choice = attn_choice.forward_choice(q, k, v, mask, q_pos, scale, causal, window, softcap, sinks)
    return ttx_traceable(q, k, v, mask, q_pos, sinks) and choice not in attn_choice.SDPA_KERNELS


def _describe_attention(q, k, v, mask, q_pos, scale, causal, window, softcap, sinks) -> str:
    attn_choice = _choice()
    choice = attn_choice.forward_choice(q, k, v, mask, q_pos, scale, causal, window, softcap, sinks)
    return f"kernel: {attn_choice.KERNEL_NAMES[choice]}"


def _traceable_attention_backward(grad_out, q, k, v, out, lse, mask, q_pos, scale, causal, window, softcap, sinks):
    attn_choice = _choice()
    choice = attn_choice.backward_choice(q, k, v, mask, q_pos, scale, causal, window, softcap, sinks)
    return ttx_traceable(q, k, v, mask, q_pos, sinks) and choice not in attn_choice.SDPA_KERNELS


lowering.register_impl("attention", "ttx", ttx_forward, supports=_supports_attention, traceable=_traceable_attention,
                       describe=_describe_attention)
lowering.register_impl("attention_backward", "ttx", ttx_backward, supports=_supports_attention_backward,
                       traceable=_traceable_attention_backward)


# -------------------------------------------------------------------------------------------- target: torch_npu
# npu_fused_infer_attention_score (FIA) for prefill and decode alike: unlike npu_fusion_attention (max and sum, in its
# own layout) and npu_incre_flash_attention (nothing), it returns the row log-sum-exp the op owes (softmax_lse_flag).
# GQA is native (num_key_value_heads), the scale is always passed (FIA's default is 1.0), and Ascend masks mean the
# opposite of ours: True = masked out. Plain causal is sparse_mode 3 (bottom-right, as the op's) with the compressed
# 2048 x 2048 mask; one query under plain causal (a decode step, bottom-right: it sees every key) takes no mask, as FIA
# ignores sparse_mode for one query; positions, windows and mask tensors become one explicit bool mask
# (sparse_mode 0). q, k and v go contiguous (FIA takes no other). Rows left with
# no key get the op's zeros and -inf by a where on the device, whatever FIA returns for them. The backward runs on the
# torch reference (no NPU op is mapped to it).
def _mask4(mask):
    """A mask broadcastable to [B, Hq, Sq, Skv] as 4-D."""
    return mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))


def _npu_reason(q, k, v, mask, q_pos, scale, causal, window, softcap, sinks):
    if softcap or sinks is not None:
        return "a softcap or sinks (no torch_npu attention op here takes them)"
    if mask is not None and mask.dtype != torch.bool:
        return "an additive mask (FIA's masks are bool; its pse_shift is not mapped)"
    if mask is not None and (mask.dim() > 4 or _mask4(mask).shape[1] != 1):
        return f"a per-head mask {tuple(mask.shape)} (FIA's masks are shared by the heads)"
    if q.shape[1] % k.shape[1] or q.shape[1] // k.shape[1] > 64:
        return f"{q.shape[1]} query heads over {k.shape[1]} kv heads (FIA: a divisor, a ratio up to 64)"
    if q.dtype not in (torch.float16, torch.bfloat16):
        return f"npu_fused_infer_attention_score takes fp16/bf16, not {q.dtype}"
    if v.shape != k.shape:
        return f"k {tuple(k.shape)} and v {tuple(v.shape)} differ (FIA: one shape for key and value)"
    heads, s_q, head_dim = q.shape[1], q.shape[2], q.shape[3]
    if heads > 256 or head_dim > 512 or (s_q != 1 and head_dim % 16):
        return (f"{heads} heads of {head_dim} for {s_q} queries (FIA: at most 256 heads, a head size up to 512, a "
                f"multiple of 16 for more than one query)")
    if q.device.type != "npu":
        return f"torch_npu runs on npu tensors, not {q.device.type}"
    return None


@functools.lru_cache(maxsize=None)
def _compressed_causal(device: torch.device) -> torch.Tensor:
    """sparse_mode 3's mask: [2048, 2048], True above the diagonal (masked out)."""
    return torch.triu(torch.ones(2048, 2048, dtype=torch.bool, device=device), 1)


def npu_forward(q, k, v, mask, q_pos, scale, causal, window, softcap, sinks):
    import torch_npu

    batch, heads, s_q, _ = q.shape
    keep, fia_mask = None, {}
    # sparse_mode 3 only where every query row keeps a key: with more queries than keys the first rows have none,
    # and the explicit path below gives them the op's 0 / -inf.
    explicit = mask is not None or q_pos is not None or window or (causal and s_q > k.shape[2])
    structure = structural_mask(q, k, q_pos, causal, window) if explicit else None  # [Sq, Skv] or None
    if mask is not None or structure is not None:
        keep = structure if mask is None else _mask4(mask) if structure is None else _mask4(mask) & structure
        keep = _mask4(keep).expand(batch, 1, s_q, k.shape[2])
        fia_mask = dict(atten_mask=(~keep).contiguous(), sparse_mode=0)  # Ascend: True = masked out
    elif causal and s_q > 1:
        fia_mask = dict(atten_mask=_compressed_causal(q.device), sparse_mode=3)
    out, lse = torch_npu.npu_fused_infer_attention_score(
        q.contiguous(), k.contiguous(), v.contiguous(), num_heads=heads, num_key_value_heads=k.shape[1],
        input_layout="BNSD", scale=scale, softmax_lse_flag=True, **fia_mask)
    lse = lse.reshape(batch, heads, s_q).float()
    if keep is not None:  # rows with no key: the op's 0 and -inf (on the device: no host sync)
        any_key = keep.any(-1)  # [B, 1, Sq]
        out = torch.where(any_key[..., None], out, torch.zeros((), dtype=out.dtype, device=out.device))
        lse = torch.where(any_key, lse, torch.full((), float("-inf"), device=lse.device))
    return out.contiguous(), lse


lowering.register_impl("attention", "torch_npu", npu_forward, supports=_npu_reason)


# ------------------------------------------------------------------------------------------ DTensor (sharding.py)
# Each q head attends alone to its kv head: q, k and v sharded on heads (tensor parallel) stay local when every
# rank's block of q heads reads its own block of kv heads -- both head counts divisible by the mesh size (GQA's
# groups kept whole). A mask, lined up with [B, H, Sq, Skv] from the right, with one head or none broadcasts
# (replicated), one per head shards with q; the sinks (one per head) shard too; the positions are per query,
# replicated.
def _heads(q, k, **_):
    ranks = sharding.mesh_size(q)
    q_heads, kv_heads = sharding.shape_of(q)[1], sharding.shape_of(k)[1]
    return [1] if q_heads % ranks == 0 and kv_heads % ranks == 0 else []


def _sinks(spec, dim):
    from torch.distributed.tensor import Shard
    return Shard(0)


def _mask(spec, dim):
    """The mask broadcasts to [B, H, Sq, Skv] from the right (a [Sq, Skv] mask is every batch's and head's): q's
    dim lines up with the mask's `dim - (4 - mask.ndim)`; absent or of size 1 there, the mask is replicated."""
    from torch.distributed.tensor import Replicate, Shard
    shape = sharding.shape_of(spec)
    aligned = dim - (4 - len(shape))
    return Replicate() if aligned < 0 or shape[aligned] == 1 else Shard(aligned)


_QKV = {"q": sharding.SAME, "k": sharding.SAME, "v": sharding.SAME, "q_pos": sharding.REPLICATE, "sinks": _sinks,
        "mask": _mask}
sharding.register_local_sharding(torch.ops.mojo.attention.default, _QKV, [sharding.SAME, sharding.SAME], dims=_heads)
sharding.register_local_sharding(torch.ops.mojo.attention_backward.default,
                                 {**_QKV, "grad_out": sharding.SAME, "out": sharding.SAME, "lse": sharding.SAME},
                                 [sharding.SAME, sharding.SAME, sharding.SAME, _sinks], dims=_heads)
