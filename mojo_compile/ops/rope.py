"""Rotary position embedding as Mojo ops: `mojo::rope(q, k, cos, sin)` rotates q and k in one launch, and
`mojo::qk_norm_rope` first RMS-normalises each head of q and k (Qwen3, Gemma3) -- one read and one write of q and k.

Layouts: q, k are 4-D, [B, S, H, D] (seq_dim=1) or [B, H, S, D] (seq_dim=2), any strides with a unit last stride;
cos/sin are [B or 1, S, R] or [S, R] (R = rotary_dim <= D). Conventions:
    interleaved=False   NeoX / Llama rotate-half: pairs (i, i + R/2)
    interleaved=True    GPT-J / GLM / Cohere: pairs (2i, 2i + 1)
    rotate_last=False   HF partial rotary: the first R dims rotate, the rest pass through
    rotate_last=True    Mojo Opset: the last R dims rotate
Numerics are eager's `q * cos + rotate_half(q) * sin` in the dtype promote(q, cos) (each product rounded, then the
sum). cos and sin take no gradient (HF computes them from buffers): the patterns check they need none.

Implementations, registered below the ops (docs/adding-a-fusion.md):
  torch      the eager spellings (rotate_half / rotate_every_two); qk_norm_rope's norm is lowering/reference.py's
             `normalise` (and `rms_norm_grad` in its backward), which the RMSNorm ops' reference shares.
  ttx        kernels/rope.py.
  torch_npu  npu_rotary_mul for rope over the whole head; the rest (partial rotary, qk_norm_rope, the backwards)
             runs on the torch reference.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .. import lowering, sharding
from ..kernels.common import FLOAT_DTYPES, ttx_elementwise_reason, ttx_traceable
from ..lowering.reference import differentiable_grads, normalise, rms_norm_grad
from .rms_norm import _check_params, rms_norm_out_dtype


def _check(q: Tensor, k: Tensor, cos: Tensor, rotary_dim: int, seq_dim: int, target: str) -> None:
    if q.dim() != 4 or k.dim() != 4 or seq_dim not in (1, 2):
        raise ValueError(f"mojo rope: q and k must be 4-D with seq_dim 1 or 2, got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, seq_dim={seq_dim}")
    if not 0 < rotary_dim <= q.shape[-1] or rotary_dim % 2 or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"mojo rope: rotary_dim {rotary_dim} must be even and at most head_dim {q.shape[-1]} "
                         f"(q and k alike)")
    if cos.shape[-1] != rotary_dim:
        raise ValueError(f"mojo rope: cos/sin have {cos.shape[-1]} columns, rotary_dim is {rotary_dim}")
    lowering.check_target_name(target)


def _heads_dim(seq_dim: int) -> int:
    return 3 - seq_dim


# ------------------------------------------------------------------------------------------------------------- rope
@torch.library.custom_op("mojo::rope", mutates_args=())
def rope(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, rotary_dim: int, interleaved: bool = False,
         seq_dim: int = 2, rotate_last: bool = False, target: str = "torch") -> tuple[Tensor, Tensor]:
    """(q rotated, k rotated): new contiguous tensors of q's / k's shape, dtype promote(q, cos)."""
    _check(q, k, cos, rotary_dim, seq_dim, target)
    return lowering.call("rope", target, q, k, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last)


@rope.register_fake
def _(q, k, cos, sin, rotary_dim, interleaved=False, seq_dim=2, rotate_last=False, target="torch"):
    return (q.new_empty(q.shape, dtype=torch.promote_types(q.dtype, cos.dtype)),
            k.new_empty(k.shape, dtype=torch.promote_types(k.dtype, cos.dtype)))


@torch.library.custom_op("mojo::rope_backward", mutates_args=())
def rope_backward(grad_q: Tensor, grad_k: Tensor, cos: Tensor, sin: Tensor, rotary_dim: int, interleaved: bool,
                  seq_dim: int, rotate_last: bool, q_dtype: torch.dtype, k_dtype: torch.dtype,
                  target: str) -> tuple[Tensor, Tensor]:
    """Gradients of q and k (the transposed rotation), in q's and k's dtypes."""
    _check(grad_q, grad_k, cos, rotary_dim, seq_dim, target)
    return lowering.call("rope_backward", target, grad_q, grad_k, cos, sin, rotary_dim, interleaved, seq_dim,
                         rotate_last, q_dtype, k_dtype)


@rope_backward.register_fake
def _(grad_q, grad_k, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last, q_dtype, k_dtype, target):
    return grad_q.new_empty(grad_q.shape, dtype=q_dtype), grad_k.new_empty(grad_k.shape, dtype=k_dtype)


def _no_grad_for(name: str, *tensors) -> None:
    """The op's backward gives these inputs no gradient: refuse rather than return a silently wrong zero."""
    if any(t is not None and t.requires_grad for t in tensors):
        raise RuntimeError(f"mojo {name}: cos and sin take no gradient here (HF computes them from buffers); "
                           "detach them, or leave this site unfused")


def _rope_setup(ctx, inputs, output):
    q, k, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last, target = inputs
    _no_grad_for("rope", cos, sin)
    ctx.save_for_backward(cos, sin)
    ctx.params = (rotary_dim, interleaved, seq_dim, rotate_last, q.dtype, k.dtype, target)


def _rope_bwd(ctx, grad_q, grad_k):
    cos, sin = ctx.saved_tensors
    if torch.is_grad_enabled():  # create_graph=True (eager autograd; AOTAutograd traces backwards without it)
        # differentiable gradients, for a second-order gradient: autograd through the torch reference
        # (reference.differentiable_grads). q and k are not saved and not needed: the rotation is linear in them, so
        # its gradient is the same at any point -- zeros of their shapes and dtypes stand in.
        rotary_dim, interleaved, seq_dim, rotate_last, q_dtype, k_dtype, _ = ctx.params
        q0, k0 = (g.new_zeros(g.shape, dtype=d).requires_grad_() for g, d in ((grad_q, q_dtype), (grad_k, k_dtype)))
        grad_q, grad_k = differentiable_grads(
            lambda q, k: reference(q, k, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last), (q0, k0),
            (True, True), (grad_q, grad_k))
        return grad_q, grad_k, None, None, None, None, None, None, None
    grad_q, grad_k = rope_backward(grad_q, grad_k, cos, sin, *ctx.params)
    return grad_q, grad_k, None, None, None, None, None, None, None


rope.register_autograd(_rope_bwd, setup_context=_rope_setup)


# ----------------------------------------------------------------------------------------------------- qk-norm + rope
def _check_norm(q, k, q_weight, k_weight, cast, seq_dim, together, target):
    _check_params(cast, target)
    if cast == "rstd":
        raise ValueError("mojo qk_norm_rope: cast must be 'normed' or 'output'")
    for x, w in ((q, q_weight), (k, k_weight)):
        width = x.shape[-1] * (x.shape[_heads_dim(seq_dim)] if together else 1)
        if w.dim() != 1 or w.shape[0] != width:
            raise ValueError(f"mojo qk_norm_rope: weight {tuple(w.shape)} is not one value per normalised column "
                             f"({width})")


def _rstd_shape(x, seq_dim, together):
    batch, seq, heads = x.shape[0], x.shape[seq_dim], x.shape[_heads_dim(seq_dim)]
    return (batch, seq) if together else (batch, seq, heads)


@torch.library.custom_op("mojo::qk_norm_rope", mutates_args=())
def qk_norm_rope(q: Tensor, k: Tensor, q_weight: Tensor, k_weight: Tensor, eps: float, weight_offset: float,
                 cast: str, cos: Tensor, sin: Tensor, rotary_dim: int, interleaved: bool, seq_dim: int,
                 norm_heads_together: bool = False, target: str = "torch") -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """rope(rms_norm(q), rms_norm(k)): (q_out, k_out, q_rstd, k_rstd). Each head is normalised over D (or each
    token over H*D when norm_heads_together, with weights of H*D). Outputs have q's / k's shape and layout."""
    _check(q, k, cos, rotary_dim, seq_dim, target)
    _check_norm(q, k, q_weight, k_weight, cast, seq_dim, norm_heads_together, target)
    return lowering.call("qk_norm_rope", target, q, k, q_weight, k_weight, eps, weight_offset, cast, cos, sin,
                         rotary_dim, interleaved, seq_dim, norm_heads_together)


@qk_norm_rope.register_fake
def _(q, k, q_weight, k_weight, eps, weight_offset, cast, cos, sin, rotary_dim, interleaved, seq_dim,
      norm_heads_together=False, target="torch"):
    outs = []
    for x, w in ((q, q_weight), (k, k_weight)):
        outs.append(x.new_empty(x.shape, dtype=torch.promote_types(rms_norm_out_dtype(x, w, cast), cos.dtype)))
    for x in (q, k):
        outs.append(x.new_empty(_rstd_shape(x, seq_dim, norm_heads_together), dtype=torch.float32))
    return tuple(outs)


@torch.library.custom_op("mojo::qk_norm_rope_backward", mutates_args=())
def qk_norm_rope_backward(grad_q: Tensor, grad_k: Tensor, q: Tensor, k: Tensor, q_weight: Tensor, k_weight: Tensor,
                          q_rstd: Tensor, k_rstd: Tensor, weight_offset: float, cast: str, cos: Tensor, sin: Tensor,
                          rotary_dim: int, interleaved: bool, seq_dim: int, norm_heads_together: bool,
                          target: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(grad_q, grad_k, grad_q_weight, grad_k_weight)."""
    _check(q, k, cos, rotary_dim, seq_dim, target)
    return lowering.call("qk_norm_rope_backward", target, grad_q, grad_k, q, k, q_weight, k_weight, q_rstd, k_rstd,
                         weight_offset, cast, cos, sin, rotary_dim, interleaved, seq_dim, norm_heads_together)


@qk_norm_rope_backward.register_fake
def _(grad_q, grad_k, q, k, q_weight, k_weight, q_rstd, k_rstd, weight_offset, cast, cos, sin, rotary_dim,
      interleaved, seq_dim, norm_heads_together, target):
    return q.new_empty(q.shape), k.new_empty(k.shape), q_weight.new_empty(q_weight.shape), \
        k_weight.new_empty(k_weight.shape)


def _qk_setup(ctx, inputs, output):
    (q, k, q_weight, k_weight, eps, weight_offset, cast, cos, sin, rotary_dim, interleaved, seq_dim, together,
     target) = inputs
    _no_grad_for("qk_norm_rope", cos, sin)
    ctx.save_for_backward(q, k, q_weight, k_weight, output[2], output[3], cos, sin)
    ctx.params = (weight_offset, cast, rotary_dim, interleaved, seq_dim, together, target)
    ctx.eps = eps  # for a second-order gradient only


def _qk_bwd(ctx, grad_q, grad_k, _grad_q_rstd, _grad_k_rstd):
    q, k, q_weight, k_weight, q_rstd, k_rstd, cos, sin = ctx.saved_tensors
    weight_offset, cast, rotary_dim, interleaved, seq_dim, together, target = ctx.params
    if torch.is_grad_enabled():  # create_graph=True: differentiable gradients, as _rope_bwd
        # recomputed: the norms of the saved q and k (the rstds too: the saved ones are this op's outputs)
        def forward(q, k, q_weight, k_weight):
            return qk_norm_reference(q, k, q_weight, k_weight, ctx.eps, weight_offset, cast, cos, sin, rotary_dim,
                                     interleaved, seq_dim, together)[:2]

        grads = differentiable_grads(forward, (q, k, q_weight, k_weight), ctx.needs_input_grad[:4],
                                     (grad_q, grad_k))
        return (*grads, *([None] * 10))
    grads = qk_norm_rope_backward(grad_q, grad_k, q, k, q_weight, k_weight, q_rstd, k_rstd, weight_offset, cast,
                                  cos, sin, rotary_dim, interleaved, seq_dim, together, target)
    return (*grads, *([None] * 10))


qk_norm_rope.register_autograd(_qk_bwd, setup_context=_qk_setup)

for _op, _name in ((rope, "rope"), (rope_backward, "rope_backward"), (qk_norm_rope, "qk_norm_rope"),
                   (qk_norm_rope_backward, "qk_norm_rope_backward")):
    lowering.inline_in_inner_compiler(_op, _name)


# ------------------------------------------------------------------------------------------------ target: torch
def _table_for(x, table, seq_dim):
    """cos/sin [B or 1, S, R] or [S, R] -> broadcastable against x (heads at 3 - seq_dim)."""
    table = table if table.dim() == 3 else table.unsqueeze(0)
    return table.unsqueeze(2 if seq_dim == 1 else 1)


def _split_rotary(x, rotary_dim, rotate_last):
    d = x.shape[-1]
    if rotate_last:
        return x[..., d - rotary_dim:], x[..., : d - rotary_dim], True
    return x[..., :rotary_dim], x[..., rotary_dim:], False


def _rotate_pairs(x, interleaved):
    """rotate_half (NeoX) or rotate_every_two (GPT-J), as the models spell them."""
    if interleaved:
        return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _unrotate_pairs(z, interleaved):
    """The transpose of _rotate_pairs."""
    if interleaved:
        return torch.stack((z[..., 1::2], -z[..., ::2]), dim=-1).flatten(-2)
    half = z.shape[-1] // 2
    return torch.cat((z[..., half:], -z[..., :half]), dim=-1)


def _join(rot, passed, rotate_last):
    if passed.shape[-1] == 0:
        return rot.contiguous()
    return torch.cat((passed.to(rot.dtype), rot) if rotate_last else (rot, passed.to(rot.dtype)), dim=-1)


def _rope_one(x, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last):
    c, s = _table_for(x, cos, seq_dim), _table_for(x, sin, seq_dim)
    rot, passed, last = _split_rotary(x, rotary_dim, rotate_last)
    return _join(rot * c + _rotate_pairs(rot, interleaved) * s, passed, last)


def reference(q, k, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last):
    return tuple(_rope_one(x, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last) for x in (q, k))


def _rope_grad_one(g, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last, dtype):
    c, s = _table_for(g, cos, seq_dim).float(), _table_for(g, sin, seq_dim).float()
    rot, passed, last = _split_rotary(g.float(), rotary_dim, rotate_last)
    return _join(rot * c + _unrotate_pairs(rot * s, interleaved), passed, last).to(dtype)


def reference_backward(grad_q, grad_k, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last, q_dtype, k_dtype):
    return (_rope_grad_one(grad_q, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last, q_dtype),
            _rope_grad_one(grad_k, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last, k_dtype))


def _bshd(x, seq_dim):
    return x if seq_dim == 1 else x.transpose(1, 2)


def _norm_rows(x_bshd, together):
    return x_bshd.reshape(*x_bshd.shape[:2], -1) if together else x_bshd


def qk_norm_reference(q, k, q_weight, k_weight, eps, weight_offset, cast, cos, sin, rotary_dim, interleaved,
                      seq_dim, together):
    outs, rstds = [], []
    for x, w in ((q, q_weight), (k, k_weight)):
        xs = _bshd(x, seq_dim)
        y, rstd = normalise(_norm_rows(xs, together), w, eps, weight_offset, cast)
        y = _rope_one(y.view(xs.shape), cos, sin, rotary_dim, interleaved, 1, False)
        outs.append(_bshd(y, seq_dim).contiguous())
        rstds.append(rstd)
    return (*outs, *rstds)


def qk_norm_reference_backward(grad_q, grad_k, q, k, q_weight, k_weight, q_rstd, k_rstd, weight_offset, cast, cos,
                                sin, rotary_dim, interleaved, seq_dim, together):
    grads, weight_grads = [], []
    for g, x, w, rstd in ((grad_q, q, q_weight, q_rstd), (grad_k, k, k_weight, k_rstd)):
        xs = _bshd(x, seq_dim)
        g_normed = _rope_grad_one(_bshd(g, seq_dim), cos, sin, rotary_dim, interleaved, 1, False, torch.float32)
        dx, dw = rms_norm_grad(_norm_rows(g_normed, together), _norm_rows(xs, together), w, rstd, None,
                                   weight_offset, cast, True)
        grads.append(_bshd(dx.view(xs.shape), seq_dim).contiguous())
        weight_grads.append(dw)
    return (*grads, *weight_grads)


lowering.register_impl("rope", "torch", reference, **lowering.TRACEABLE)
lowering.register_impl("rope_backward", "torch", reference_backward, **lowering.TRACEABLE)
lowering.register_impl("qk_norm_rope", "torch", qk_norm_reference, **lowering.TRACEABLE)
lowering.register_impl("qk_norm_rope_backward", "torch", qk_norm_reference_backward, **lowering.TRACEABLE)


# -------------------------------------------------------------------------------------------------- target: ttx
def _kernels():
    """kernels/rope.py, imported on first use: Triton is needed only where ttx runs."""
    from ..kernels import rope as kernels
    return kernels


def _ttx_reason(q, k, cos, sin, *weights, seq_dim):
    reason = ttx_elementwise_reason(q, k) or ttx_elementwise_reason(cos, sin)
    if reason:
        return reason
    if q.dtype != k.dtype:
        return f"q {q.dtype} and k {k.dtype} differ in dtype"
    if q.shape[0] != k.shape[0] or q.shape[seq_dim] != k.shape[seq_dim]:
        # (the kernels walk q's tokens for both; the reference broadcasts one table over each as eager does)
        return f"q {tuple(q.shape)} and k {tuple(k.shape)} differ in batch or positions"
    if cos.dtype != sin.dtype or cos.shape != sin.shape or cos.dim() not in (2, 3):
        return f"cos/sin {tuple(cos.shape)} {cos.dtype} are not [B or 1, S, R] or [S, R] of one dtype"
    for w in weights:
        if w.dtype not in FLOAT_DTYPES or w.stride(0) != 1 or w.device != q.device:
            return f"norm weight {w.dtype} on {w.device} is not a contiguous float vector beside q"
    return None


def _supports_rope(q, k, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last):
    return _ttx_reason(q, k, cos, sin, seq_dim=seq_dim)


def _supports_rope_backward(grad_q, grad_k, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last, q_dtype,
                            k_dtype):
    if q_dtype != k_dtype:
        return "q and k of different dtypes"
    return _ttx_reason(grad_q, grad_k, cos, sin, seq_dim=seq_dim)


def ttx_forward(q, k, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last):
    return _kernels().rope_fwd(q, k, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last)


def ttx_backward(grad_q, grad_k, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last, q_dtype, k_dtype):
    return _kernels().rope_bwd(grad_q, grad_k, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last, q_dtype)


lowering.register_impl("rope", "ttx", ttx_forward, supports=_supports_rope, traceable=ttx_traceable)
lowering.register_impl("rope_backward", "ttx", ttx_backward, supports=_supports_rope_backward, traceable=ttx_traceable)


def _supports_qk_norm_rope(q, k, q_weight, k_weight, eps, weight_offset, cast, cos, sin, rotary_dim, interleaved,
                           seq_dim, together):
    return _ttx_reason(q, k, cos, sin, q_weight, k_weight, seq_dim=seq_dim)


def _supports_qk_norm_rope_backward(grad_q, grad_k, q, k, q_weight, k_weight, q_rstd, k_rstd, weight_offset, cast,
                                    cos, sin, rotary_dim, interleaved, seq_dim, together):
    return _ttx_reason(q, k, cos, sin, q_weight, k_weight, seq_dim=seq_dim) or ttx_elementwise_reason(grad_q, grad_k)


def ttx_qk_norm_forward(q, k, q_weight, k_weight, eps, weight_offset, cast, cos, sin, rotary_dim, interleaved,
                        seq_dim, together):
    return _kernels().qk_norm_rope_fwd(q, k, q_weight, k_weight, eps, cast, cos, sin, rotary_dim, interleaved,
                                       seq_dim, together, weight_offset=weight_offset)


def ttx_qk_norm_backward(grad_q, grad_k, q, k, q_weight, k_weight, q_rstd, k_rstd, weight_offset, cast, cos, sin,
                         rotary_dim, interleaved, seq_dim, together):
    return _kernels().qk_norm_rope_bwd(grad_q, grad_k, q, k, q_weight, k_weight, q_rstd, k_rstd, cast, cos, sin,
                                       rotary_dim, interleaved, seq_dim, together, weight_offset=weight_offset)


lowering.register_impl("qk_norm_rope", "ttx", ttx_qk_norm_forward, supports=_supports_qk_norm_rope,
                       traceable=ttx_traceable)
lowering.register_impl("qk_norm_rope_backward", "ttx", ttx_qk_norm_backward, supports=_supports_qk_norm_rope_backward,
                       traceable=ttx_traceable)


# -------------------------------------------------------------------------------------------- target: torch_npu
def _npu_reason(q, k, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last):
    if rotary_dim != q.shape[-1]:
        return "npu_rotary_mul rotates the whole head (partial rotary runs on the torch reference)"
    if q.dtype not in FLOAT_DTYPES:
        return f"npu_rotary_mul takes fp16/bf16/fp32, not {q.dtype}"
    if cos.dtype != q.dtype or k.dtype != q.dtype:
        return f"npu_rotary_mul takes cos/sin in the dtype of q ({q.dtype}), not {cos.dtype}"
    if q.shape[-1] >= 896 or max(q.shape[0], q.shape[3 - seq_dim], k.shape[3 - seq_dim]) >= 1000:
        return f"npu_rotary_mul's limits (D < 896, B and heads < 1000): q {tuple(q.shape)}, k {tuple(k.shape)}"
    if interleaved and cos.dim() == 3 and cos.shape[0] != 1:
        return "a table per batch row: npu_rotary_mul's interleave mode takes one table for the batch (11SD / 1S1D)"
    if interleaved and q.shape[0] * max(q.shape[3 - seq_dim], k.shape[3 - seq_dim]) >= 1000:
        return f"npu_rotary_mul's interleave limit (B * heads < 1000): q {tuple(q.shape)}, k {tuple(k.shape)}"
    if q.device.type != "npu":
        return f"torch_npu runs on npu tensors, not {q.device.type}"
    return None


def npu_forward(q, k, cos, sin, rotary_dim, interleaved, seq_dim, rotate_last):
    """npu_rotary_mul per tensor, cos/sin broadcast over the heads dim (layout limits: see seed-contracts.md)."""
    import torch_npu

    def table(t):
        return (t if t.dim() == 3 else t.unsqueeze(0)).unsqueeze(3 - seq_dim)

    mode = "interleave" if interleaved else "half"
    return tuple(torch_npu.npu_rotary_mul(x, table(cos), table(sin), rotary_mode=mode).contiguous() for x in (q, k))


lowering.register_impl("rope", "torch_npu", npu_forward, supports=_npu_reason)


# ------------------------------------------------------------------------------------------ DTensor (sharding.py)
# Each head rotates alone with the same cos / sin: q and k sharded on their heads (tensor parallel) stay local, the
# tables replicated. The qk-norm normalises each head over D, so it is local too -- unless it normalises all heads
# together (OLMo2's norm over H * D). Its rstd is [B, S, H]: heads on dim 2.
def _heads(seq_dim, norm_heads_together=False, **_):
    return [] if norm_heads_together else [_heads_dim(seq_dim)]


def _rstd_heads(spec, dim):
    from torch.distributed.tensor import Shard
    return Shard(2)


_TABLES = {"cos": sharding.REPLICATE, "sin": sharding.REPLICATE}
sharding.register_local_sharding(torch.ops.mojo.rope.default, {"q": sharding.SAME, "k": sharding.SAME, **_TABLES},
                                 [sharding.SAME, sharding.SAME], dims=_heads)
sharding.register_local_sharding(torch.ops.mojo.rope_backward.default,
                                 {"grad_q": sharding.SAME, "grad_k": sharding.SAME, **_TABLES},
                                 [sharding.SAME, sharding.SAME], dims=_heads)
_QK = {"q": sharding.SAME, "k": sharding.SAME, "q_weight": sharding.REPLICATE, "k_weight": sharding.REPLICATE,
       **_TABLES}
sharding.register_local_sharding(torch.ops.mojo.qk_norm_rope.default, _QK,
                                 [sharding.SAME, sharding.SAME, _rstd_heads, _rstd_heads], dims=_heads)
sharding.register_local_sharding(torch.ops.mojo.qk_norm_rope_backward.default,
                                 {**_QK, "grad_q": sharding.SAME, "grad_k": sharding.SAME, "q_rstd": _rstd_heads,
                                  "k_rstd": _rstd_heads},
                                 [sharding.SAME, sharding.SAME, sharding.PARTIAL, sharding.PARTIAL], dims=_heads)
