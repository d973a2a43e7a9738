"""Decode GEMVs as Mojo ops (issue 15): the projections of a decode step, where x has at most 4 rows (batch <= 4,
one token each) and every nn.Linear reads its whole weight for a handful of output values.

    mojo::linear(x, weight)                                 x @ weight.T (no bias)
    mojo::gated_linear(x, gate_weight, up_weight, act)      act(x @ gate_weight.T) * (x @ up_weight.T)
    mojo::linear2(x, w0, w1) / mojo::linear3(x, w0, w1, w2) (x @ w0.T, x @ w1.T[, x @ w2.T]): q, k, v of one x in one
                                                            launch (made by a graph pass, patterns/linear.py)

Inference only: no autograd formula (the patterns refuse a site where autograd may want a gradient of x or of a
weight). act: "silu", "gelu_tanh", "gelu", as mojo::gated_act.

Implementations, registered below the ops (docs/adding-a-fusion.md):
  torch      eager's ops: `F.linear(x, w)` -- ATen computes a bias-free linear as `matmul(x, w.t())`, which is also
             what the graph's `x @ w.t()` and `mm(x, w.t())` compute -- so the op is eager's bit for bit; the gated
             form is eager's three ops (two linears, act, product), step for step.
  ttx        kernels/linear.py: one program per 1-2 weight rows, fp32 accumulation, the result rounded once to x's
             dtype (as accurate as eager's GEMM, another summation order). `supports` refuses (torch fallback, the
             reason logged): more than 4 rows or none, symbolic rows, dtypes other than fp16 / bf16 / fp32, x and
             weights of different dtypes or devices, a last dim that is not contiguous (a transposed weight, every
             other column), a device ttx does not run on; and 2-4 rows against weights large enough that cuBLAS
             was measured faster (kernels/linear.py's table: there the torch reference is cuBLAS itself).
  torch_npu  none registered: torch_npu has no fused GEMV op to map, so on npu tensors the torch reference runs
             (the fallback, its reason logged), as for gated_act.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .. import lowering
from ..lowering.reference import ACTIVATIONS, activation
from ..kernels.common import FLOAT_DTYPES, size_hint, ttx_device_reason, ttx_traceable

MAX_ROWS = 4  # kernels/linear.py's MAX_ROWS (kept here too: this module imports without Triton)


def rows(x: Tensor):
    """The number of rows of x [..., K]: the product of its leading dims (an int, or a SymInt where symbolic)."""
    m = 1
    for s in x.shape[:-1]:
        m = m * s
    return m


def _check(target: str, x: Tensor, *weights: Tensor) -> None:
    """What every target needs (a clear error, not a kernel's): weights [N, K] of x's last dim."""
    lowering.check_target_name(target)
    if x.dim() < 1:
        raise ValueError("mojo linear: x must have at least one dim")
    for w in weights:
        if w.dim() != 2 or w.shape[1] != x.shape[-1]:
            raise ValueError(f"mojo linear: weight {list(w.shape)} is not [N, {x.shape[-1]}] for x {list(x.shape)}")


def _out(x: Tensor, w: Tensor) -> Tensor:
    return x.new_empty([*x.shape[:-1], w.shape[0]])


# ------------------------------------------------------------------------------------------------------------ ops
@torch.library.custom_op("mojo::linear", mutates_args=())
def linear(x: Tensor, weight: Tensor, target: str = "torch") -> Tensor:
    """x @ weight.T: x [..., K], weight [N, K] -> [..., N]."""
    _check(target, x, weight)
    return lowering.call("linear", target, x, weight)


@linear.register_fake
def _(x, weight, target="torch"):
    return _out(x, weight)


@torch.library.custom_op("mojo::gated_linear", mutates_args=())
def gated_linear(x: Tensor, gate_weight: Tensor, up_weight: Tensor, act: str = "silu",
                 target: str = "torch") -> Tensor:
    """act(x @ gate_weight.T) * (x @ up_weight.T): both weights [I, K] -> [..., I]."""
    if act not in ACTIVATIONS:
        raise ValueError(f"mojo gated_linear: act must be one of {ACTIVATIONS}, got {act!r}")
    _check(target, x, gate_weight, up_weight)
    if gate_weight.shape != up_weight.shape:
        raise ValueError(f"mojo gated_linear: gate weight {list(gate_weight.shape)} and up weight "
                         f"{list(up_weight.shape)} differ")
    return lowering.call("gated_linear", target, x, gate_weight, up_weight, act)


@gated_linear.register_fake
def _(x, gate_weight, up_weight, act="silu", target="torch"):
    return _out(x, gate_weight)


@torch.library.custom_op("mojo::linear2", mutates_args=())
def linear2(x: Tensor, w0: Tensor, w1: Tensor, target: str = "torch") -> tuple[Tensor, Tensor]:
    """(x @ w0.T, x @ w1.T) in one launch."""
    _check(target, x, w0, w1)
    return tuple(lowering.call("linear2", target, x, w0, w1))


@linear2.register_fake
def _(x, w0, w1, target="torch"):
    return _out(x, w0), _out(x, w1)


@torch.library.custom_op("mojo::linear3", mutates_args=())
def linear3(x: Tensor, w0: Tensor, w1: Tensor, w2: Tensor, target: str = "torch") -> tuple[Tensor, Tensor, Tensor]:
    """(x @ w0.T, x @ w1.T, x @ w2.T) in one launch: q, k and v."""
    _check(target, x, w0, w1, w2)
    return tuple(lowering.call("linear3", target, x, w0, w1, w2))


@linear3.register_fake
def _(x, w0, w1, w2, target="torch"):
    return _out(x, w0), _out(x, w1), _out(x, w2)


for _op, _name in ((linear, "linear"), (gated_linear, "gated_linear"), (linear2, "linear2"), (linear3, "linear3")):
    lowering.inline_in_inner_compiler(_op, _name)


# ------------------------------------------------------------------------------------------------ target: torch


def reference(x, weight):
    return F.linear(x, weight)


def gated_reference(x, gate_weight, up_weight, act):
    return activation(F.linear(x, gate_weight), act) * F.linear(x, up_weight)


def references(x, *weights):
    return tuple(F.linear(x, w) for w in weights)


lowering.register_impl("linear", "torch", reference, **lowering.TRACEABLE)
lowering.register_impl("gated_linear", "torch", gated_reference, **lowering.TRACEABLE)
lowering.register_impl("linear2", "torch", references, **lowering.TRACEABLE)
lowering.register_impl("linear3", "torch", references, **lowering.TRACEABLE)


# -------------------------------------------------------------------------------------------------- target: ttx
def _kernels():
    """kernels/linear.py, imported on first use: Triton is needed only where ttx runs."""
    from ..kernels import linear as kernels
    return kernels


def _unit_last_stride(t: Tensor) -> bool:
    return statically_known_true(t.shape[-1] <= 1) or statically_known_true(t.stride(-1) == 1)


def ttx_reason(x: Tensor, *weights: Tensor):
    """None if the GEMV kernels take x and these weights, else why not. Several weights (linear2 / linear3): each is
    its own GEMV of the launch, so the largest decides whether cuBLAS is faster."""
    return _reason(x, weights, max)


def _reason(x: Tensor, weights, elements):
    reason = ttx_device_reason(x)
    if reason:
        return reason
    if x.device.type == "npu":  # (a grid of N / 2 programs: Ascend's plans run one program per core)
        return "the GEMV kernels have no launch plan for Ascend (kernels/linear.py: NVIDIA GPUs)"
    if x.dtype not in FLOAT_DTYPES:
        return f"dtype {x.dtype} is not fp16/bf16/fp32"
    if x.dim() < 1:
        return "a 0-d x"
    m = rows(x)
    if not isinstance(m, int):
        return f"the number of rows of x {list(x.shape)} is symbolic (the kernel unrolls a static count)"
    if not 1 <= m <= MAX_ROWS:
        return f"x has {m} rows; the GEMV kernel takes 1 to {MAX_ROWS} (cuBLAS is the faster GEMM beyond)"
    if not _unit_last_stride(x):
        return "x's last dim is strided (the kernel reads unit-stride columns)"
    for w in weights:
        if w.dtype != x.dtype:
            return f"a weight is {w.dtype}, x is {x.dtype}"
        if w.device != x.device:
            return "x and a weight are on different devices"
        if w.dim() != 2:
            return f"a weight is {w.dim()}-D, not [N, K]"
        if not _unit_last_stride(w):
            return "a weight's last dim is strided (a transposed weight, or a column slice with a step)"
    return _kernels().gemv_reason(m, elements([size_hint(w.shape[0] * w.shape[1]) for w in weights]))


def _traceable(x, *args):
    return ttx_traceable(x, *(a for a in args if isinstance(a, Tensor)))


def _describe(x, *weights):
    kernels = _kernels()
    block_n, block_k, num_warps = kernels.config(max(size_hint(w.shape[0]) for w in weights), x.shape[-1], rows(x))
    return f"kernel: GEMV {rows(x)} row(s), {block_n} x {block_k} tiles, {num_warps} warps"


def ttx_linear(x, weight):
    return _kernels().linear_fwd(x, weight)


def ttx_gated_linear(x, gate_weight, up_weight, act):
    return _kernels().gated_linear_fwd(x, gate_weight, up_weight, act)


def ttx_linears(x, *weights):
    return tuple(_kernels().linears_fwd(x, weights))


def _gated_reason(x, gate_weight, up_weight, act):
    """Both weights are read by every program: their sum decides whether cuBLAS is faster."""
    return _reason(x, (gate_weight, up_weight), sum)


def _gated_describe(x, gate_weight, up_weight, act):
    kernels = _kernels()
    block_n, block_k, num_warps = kernels.config(gate_weight.shape[0], x.shape[-1], rows(x), gated=True)
    return f"kernel: gated GEMV {rows(x)} row(s), {block_n} x {block_k} tiles of each weight, {num_warps} warps"


lowering.register_impl("linear", "ttx", ttx_linear, supports=ttx_reason, traceable=_traceable, describe=_describe)
lowering.register_impl("gated_linear", "ttx", ttx_gated_linear, supports=_gated_reason, traceable=_traceable,
                       describe=_gated_describe)
lowering.register_impl("linear2", "ttx", ttx_linears, supports=ttx_reason, traceable=_traceable, describe=_describe)
lowering.register_impl("linear3", "ttx", ttx_linears, supports=ttx_reason, traceable=_traceable, describe=_describe)
