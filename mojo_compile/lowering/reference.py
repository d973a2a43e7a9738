"""The torch math several families' torch references (and implementations) share, kept in one place rather than
imported from one op module into another:

    normalise, rms_norm_grad      RMSNorm of rows and its gradient: the RMSNorm ops (ops/rms_norm.py) and the norm
                                  of qk_norm_rope (ops/rope.py)
    CHUNK_ELEMENTS, row_chunks    the size of the references' fp32 temporaries
    cross_entropy_*               the loss per row, its reduction and its row gradients: mojo::cross_entropy
                                  (ops/cross_entropy.py) and mojo::linear_cross_entropy (ops/linear_cross_entropy.py),
                                  their torch references and their ttx implementations
    ACTIVATIONS, activation       the gated activations as eager spells them: mojo::gated_act (ops/gated_act.py)
                                  and mojo::gated_linear (ops/linear.py)
    differentiable_grads          gradients through a reference under create_graph=True (a second-order gradient):
                                  the backward of every op with its own backward kernel

Written as the eager spellings the patterns replace, so that on the torch target a compiled model computes exactly
what the uncompiled one does, rounding included. Outputs are contiguous, as the fake impls promise.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

ACTIVATIONS = ("silu", "gelu_tanh", "gelu")  # the `act` of the gated ops (kernels/common.py: ACT_CODES)


def activation(g, act: str):
    """act(g) as eager computes it: F.silu, F.gelu(approximate="tanh"), F.gelu."""
    if act == "silu":
        return F.silu(g)
    return F.gelu(g, approximate="tanh" if act == "gelu_tanh" else "none")


def sum_rows(t):
    """[..., N] summed over every dim but the last, to [N] (a weight's or bias's gradient). Not through an [M, N]
    view: reshape(-1, N) cannot infer the -1 when N = 0 (an empty hidden size), and a DTensor sharded on a leading
    dim (sequence parallel) cannot flatten it without a redistribution, which DTensor refuses for a view."""
    return t.sum(dim=tuple(range(t.dim() - 1))) if t.dim() > 1 else t


def normalise(x, weight, eps, weight_offset, cast):
    """RMSNorm of the rows of x as the `cast` spelling rounds it (ops/rms_norm.py): (y, rstd fp32)."""
    x32 = x.float()
    rstd = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    if cast in ("normed", "rstd"):
        y = x * rstd.to(x.dtype) if cast == "rstd" else (x32 * rstd).to(x.dtype)
        if weight is not None:  # == `weight * y` in the promoted dtype: the fp32 product of two halves is exact
            y = (y.float() * (weight.float() + weight_offset)).to(torch.promote_types(weight.dtype, x.dtype))
    else:  # "output": everything in fp32, one cast at the end
        y = x32 * rstd
        if weight is not None:
            y = y * (weight.float() + weight_offset)
        y = y.to(x.dtype)
    return y.contiguous(), rstd.squeeze(-1).contiguous()


def rms_norm_grad(grad_y, x, weight, rstd, grad_residual, weight_offset, cast, weight_grad):
    """fp32 gradient of y = n * w_eff with n = x * rstd (the casts are treated as identities)."""
    g = grad_y.float()
    n = x.float() * rstd.unsqueeze(-1)
    grad_n = g if weight is None else g * (weight.float() + weight_offset)
    grad_x = rstd.unsqueeze(-1) * (grad_n - n * (grad_n * n).mean(-1, keepdim=True))
    if grad_residual is not None:
        grad_x = grad_x + grad_residual.float()
    if weight is not None and weight_grad:
        n_seen = n.to(x.dtype).float() if cast == "normed" else n  # the weight multiplied the rounded value
        grad_w = sum_rows(g * n_seen).to(weight.dtype)
    else:
        grad_w = x.new_empty((0,))
    return grad_x.to(x.dtype).contiguous(), grad_w


# ------------------------------------------------------------------------------------------------ cross entropy
CHUNK_ELEMENTS = 1 << 24  # fp32 temporaries per chunk of rows (64 MB), where the sizes are static


def row_chunks(*row_tensors):
    """The tensors (first dim N) split in chunks of rows, so that a [rows, V] fp32 temporary stays at most
    CHUNK_ELEMENTS; one chunk where N or V is symbolic (Inductor fuses the fp32 math there anyway)."""
    n, v = row_tensors[0].shape[0], row_tensors[0].shape[-1]
    if not (isinstance(n, int) and isinstance(v, int)) or n * v <= CHUNK_ELEMENTS:
        return [row_tensors]
    rows = max(1, CHUNK_ELEMENTS // max(v, 1))
    return list(zip(*(t.split(rows) for t in row_tensors)))


def lse_as_log_softmax(lse):
    """The rows' log-sum-exp as eager's log_softmax has it: it subtracts the row's max, so a row holding +inf
    (an fp16 logit that overflowed) gives inf - inf = NaN -- its loss, and its whole gradient row (ignored rows
    too), are NaN -- where torch.logsumexp special-cases an infinite max to +inf. (A finite row's log-sum-exp in
    fp32 never reaches +inf.) The ttx kernels' max propagates the same way."""
    return torch.where(lse == float("inf"), float("nan"), lse)


def cross_entropy_rows(labels, ignore_index, n_classes):
    """(ignored, bad) per row: the label is ignore_index; the label is neither that nor a class in [0, V)."""
    ignored = labels == ignore_index
    return ignored, ~ignored & ((labels < 0) | (labels >= n_classes))


def cross_entropy_reduce(row_loss, labels, ignore_index, reduction):
    """The per-row losses (fp32, 0 on ignored rows) reduced as torch does: deterministic torch ops."""
    if reduction == "none":
        return row_loss
    total = row_loss.sum()
    if reduction == "sum":
        return total
    return total / (labels != ignore_index).sum().to(torch.float32)  # 0 / 0 = NaN when every row is ignored


def cross_entropy_row_grads(grad_loss, grad_lse, labels, ignore_index, reduction, n_classes,
                            label_smoothing=0.0):
    """(a, b, c), fp32 [N] (c None without label smoothing): dlogits[i, j] = softmax(logits)[i, j] * a[i]
    - (j == labels[i]) * b[i] - c[i]. With g the loss's gradient per row (0 on ignored rows, NaN on rows with a
    label out of range): a = g plus the gradient of lse, b = (1 - eps) g, c = eps g / V -- the smoothed target
    puts 1 - eps on the label and eps / V on every class."""
    ignored, bad = cross_entropy_rows(labels, ignore_index, n_classes)
    g = grad_loss.float()
    if reduction == "mean":
        g = g / (~ignored).sum().to(torch.float32)
    g = torch.where(ignored, 0.0, torch.where(bad, float("nan"), g.expand(labels.shape)))
    a = g if grad_lse is None else g + grad_lse.float()
    if not label_smoothing:
        return a, g, None
    return a, g * (1 - label_smoothing), g * (label_smoothing / n_classes)


def cross_entropy_smoothed(nll, lse, row_sum, labels, ignore_index, n_classes, label_smoothing):
    """The per-row loss with label smoothing eps, as torch's: (1 - eps) * nll + eps / V * smooth, where smooth =
    -sum_j log_softmax_j = V * lse - sum_j logits_j (row_sum, fp32); 0 on ignored rows, NaN where nll is. Without
    smoothing, nll itself."""
    if not label_smoothing:
        return nll
    ignored = labels == ignore_index
    smooth = lse - row_sum / n_classes
    return torch.where(ignored, 0.0, nll * (1 - label_smoothing) + smooth * label_smoothing)


def differentiable_grads(fn, inputs, wanted, outputs_grads):
    """Gradients that are differentiable themselves, for a second-order gradient (torch.autograd.grad(...,
    create_graph=True), then a backward through it): autograd through `fn`, the op's torch reference recomputed on
    the saved tensors `inputs`, as eager differentiates its own. The `*_backward` Mojo ops have no autograd formula:
    without this a double backward raised. `fn(*inputs)` returns the outputs that `outputs_grads` (None: no
    gradient) go with; an input not `wanted` gets None."""
    result = [None] * len(inputs)
    wanted = [i for i, (t, w) in enumerate(zip(inputs, wanted)) if w and t is not None and t.requires_grad]
    # Each input differentiated is an alias (a view of the whole, its own autograd node) that only the reference
    # reads: autograd.grad at the saved tensor itself would also count the paths through another input computed
    # from it (attention's k = q * 0.5, up = gate * 2), the total derivative where the op's is the partial one.
    inputs = [t.view_as(t) if i in wanted else t for i, t in enumerate(inputs)]
    with torch.enable_grad():
        outputs = fn(*inputs)
    pairs = [(o, g) for o, g in zip(outputs, outputs_grads) if g is not None]
    if not wanted or not pairs:
        return result
    outs, grads = zip(*pairs)
    got = torch.autograd.grad(outs, [inputs[i] for i in wanted], grads, create_graph=True, allow_unused=True)
    for i, g in zip(wanted, got):
        result[i] = g
    return result
