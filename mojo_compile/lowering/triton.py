"""Target `ttx`: Triton kernels. NVIDIA GPUs natively, Ascend through triton-ascend, CPU tensors under
TRITON_INTERPRET=1 (how CI checks the kernels)."""
from __future__ import annotations

import torch

from ..kernels import rms_norm as rms_kernels
from ..ops.rms_norm import rms_norm_out_dtype
from .table import Impl

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _device_reason(t: torch.Tensor):
    if t.device.type == "cuda" or (t.device.type == "cpu" and rms_kernels.interpreting()):
        return None
    if t.device.type == "cpu":
        return "ttx runs on CUDA tensors; these are on the CPU (set TRITON_INTERPRET=1 to interpret the kernels)"
    return f"ttx does not run on {t.device.type} tensors"


def _rows_reason(x, weight, *others):
    reason = _device_reason(x)
    if reason:
        return reason
    if x.dtype not in FLOAT_DTYPES:
        return f"input dtype {x.dtype} is not fp16/bf16/fp32"
    if x.dim() == 0:
        return "a 0-d input has no dim to normalise"
    if weight is not None:
        if weight.dtype not in FLOAT_DTYPES:
            return f"weight dtype {weight.dtype} is not fp16/bf16/fp32"
        if weight.dim() != 1 or weight.shape[0] != x.shape[-1] or weight.device != x.device:
            return f"weight {tuple(weight.shape)} on {weight.device} is not one value per column of x {tuple(x.shape)}"
        if weight.stride(0) != 1:
            return "weight is not contiguous"
    for t in others:
        if t is not None and (t.shape != x.shape or t.device != x.device):
            return f"a tensor of shape {tuple(t.shape)} does not match x {tuple(x.shape)}"
    return None


def rms_norm(x, weight, eps, weight_offset, cast):
    y, _, rstd = rms_kernels.rms_norm_fwd(x, None, weight, eps, weight_offset, cast,
                                          rms_norm_out_dtype(x, weight, cast))
    return y, rstd


def add_rms_norm(x, residual, weight, eps, weight_offset, cast):
    return rms_kernels.rms_norm_fwd(x, residual, weight, eps, weight_offset, cast, rms_norm_out_dtype(x, weight, cast))


def _supports_rms_norm(x, weight, eps, weight_offset, cast):
    return _rows_reason(x, weight)


def _supports_add_rms_norm(x, residual, weight, eps, weight_offset, cast):
    return _rows_reason(x, weight, residual)


def _supports_backward(grad_y, x, weight, rstd, grad_residual, weight_offset, cast, weight_grad):
    return _rows_reason(x, weight, grad_y, grad_residual)


def _traceable() -> bool:
    """Inductor launches the kernels itself, except under the interpreter (it cannot run on fake tensors)."""
    return not rms_kernels.interpreting()


TABLE = {
    "rms_norm": Impl(rms_norm, _supports_rms_norm, _traceable),
    "add_rms_norm": Impl(add_rms_norm, _supports_add_rms_norm, _traceable),
    "rms_norm_backward": Impl(rms_kernels.rms_norm_bwd, _supports_backward, _traceable),
}
