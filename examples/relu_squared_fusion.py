"""An out-of-tree fusion: squared ReLU (`F.relu(x) ** 2`, Primer's and Nemotron's MLP activation) as a Mojo op with a
Triton kernel of its own, declared end to end in this one module through mojo_compile's public API. Nothing inside
mojo_compile/ is edited (docs/adding-a-fusion.md walks through it).

    python examples/relu_squared_fusion.py      # a small MLP compiled with backend="mojo", checked against eager

Importing this module registers the fusion. A package would list it under the entry-point group
"mojo_compile.fusions" (`[project.entry-points."mojo_compile.fusions"] relu_squared = "mypkg.relu_squared"`), and
mojo_compile imports it with its built-ins.

The parts, each registered beside its definition:
  1. the op: `mojo::relu_squared(x, target)` and its backward op, torch.library custom ops whose bodies call
     `lowering.call` (the target's implementation, or the torch reference with a logged reason), with fake impls,
     autograd, and `inline_in_inner_compiler` (under Inductor the chosen implementation is traced into its graph);
  2. implementations per target (`register_impl`): the torch reference -- eager's ops, so eager's roundings -- and a
     Triton kernel for "ttx" with its `supports` check;
  3. the pattern (`register_pattern`): eager's spelling, `F.relu(x) ** 2` (`x.square()` and `r * r` canonicalise to
     it).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch import Tensor

import mojo_compile
from mojo_compile import lowering
from mojo_compile.kernels.common import interpreting, round_to, wrap_triton, writes

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
BLOCK = 1024


# ------------------------------------------------------------------------------------------------------------ the op
@torch.library.custom_op("mojo::relu_squared", mutates_args=())
def relu_squared(x: Tensor, target: str = "torch") -> Tensor:
    """relu(x) ** 2 in x's dtype, as eager rounds it (once, after the fp32 product)."""
    return lowering.call("relu_squared", target, x)


@relu_squared.register_fake
def _(x, target="torch"):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("mojo::relu_squared_backward", mutates_args=())
def relu_squared_backward(grad: Tensor, x: Tensor, target: str) -> Tensor:
    """grad * 2 relu(x) where relu(x) > 0, else 0: eager's pow and relu backwards."""
    return lowering.call("relu_squared_backward", target, grad, x)


@relu_squared_backward.register_fake
def _(grad, x, target):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _setup(ctx, inputs, output):
    x, target = inputs
    ctx.save_for_backward(x)
    ctx.target = target


def _backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return relu_squared_backward(grad, x, ctx.target), None


relu_squared.register_autograd(_backward, setup_context=_setup)
lowering.inline_in_inner_compiler(relu_squared, "relu_squared")
lowering.inline_in_inner_compiler(relu_squared_backward, "relu_squared_backward")


# ----------------------------------------------------------------------------------------- the torch reference
def reference(x):
    return torch.relu(x).pow(2)


def reference_backward(grad, x):
    r = torch.relu(x)
    return torch.where(r <= 0, torch.zeros((), dtype=grad.dtype, device=grad.device), grad * (2 * r)).contiguous()


# torch ops: Inductor traces them and fuses them with their neighbours
mojo_compile.register_impl("relu_squared", "torch", reference, **lowering.TRACEABLE)
mojo_compile.register_impl("relu_squared_backward", "torch", reference_backward, **lowering.TRACEABLE)


# -------------------------------------------------------------------------------------------------- the ttx kernel
@writes("Y")
@triton.jit
def _fwd_kernel(X, Y, N, BLOCK: tl.constexpr, INTERPRET: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    r = tl.where(x < 0, 0.0, x)  # relu keeps a NaN (tl.maximum may not)
    tl.store(Y + offs, round_to(r * r, Y.dtype.element_ty, INTERPRET), mask=mask)


@writes("DX")
@triton.jit
def _bwd_kernel(G, X, DX, N, BLOCK: tl.constexpr, INTERPRET: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    g = tl.load(G + offs, mask=mask, other=0.0).to(tl.float32)
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    r = tl.where(x < 0, 0.0, x)
    d = tl.where(r <= 0, 0.0, g * (2.0 * r))  # 2 r is exact in the dtype: one rounding, as eager's
    tl.store(DX + offs, round_to(d, DX.dtype.element_ty, INTERPRET), mask=mask)


def _launch(kernel, out, *inputs):
    n = out.numel()
    if n:
        wrap_triton(kernel)[(triton.cdiv(n, BLOCK),)](*inputs, out, n, BLOCK=BLOCK, INTERPRET=interpreting())
    return out


def relu_squared_ttx(x):
    return _launch(_fwd_kernel, torch.empty_like(x, memory_format=torch.contiguous_format), x)


def relu_squared_backward_ttx(grad, x):
    return _launch(_bwd_kernel, torch.empty_like(x, memory_format=torch.contiguous_format), grad, x)


def _reason(*tensors):
    """Why the kernels cannot take these tensors, or None: CUDA (or the CPU under TRITON_INTERPRET=1), a float
    dtype, one shape and dtype, contiguous (the kernels index the flat storage)."""
    x = tensors[0]
    if not (x.device.type == "cuda" or (x.device.type == "cpu" and interpreting())):
        return f"ttx does not run on {x.device.type} tensors here"
    if x.dtype not in FLOAT_DTYPES:
        return f"dtype {x.dtype} is not fp16/bf16/fp32"
    for t in tensors:
        if t.shape != x.shape or t.dtype != x.dtype or t.device != x.device or not t.is_contiguous():
            return "inputs of different shapes, dtypes or devices, or not contiguous"
    return None


def _traceable(*tensors):
    return not interpreting()  # the interpreter cannot run on fake tensors; Inductor launches compiled kernels


mojo_compile.register_impl("relu_squared", "ttx", relu_squared_ttx, supports=_reason, traceable=_traceable)
mojo_compile.register_impl("relu_squared_backward", "ttx", relu_squared_backward_ttx, supports=_reason,
                           traceable=_traceable)


# ----------------------------------------------------------------------------------------------------- the pattern
def _search(x):
    return F.relu(x) ** 2


def _replace(x):
    return torch.ops.mojo.relu_squared(x)


mojo_compile.register_pattern("relu_squared", _search, _replace, [(torch.randn(8, 16),)], family="relu_squared")


# ------------------------------------------------------------------------------------------------------------ demo
class SquaredReluMLP(torch.nn.Module):
    def __init__(self, hidden=64, inter=256):
        super().__init__()
        self.up = torch.nn.Linear(hidden, inter, bias=False)
        self.down = torch.nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down(F.relu(self.up(x)) ** 2)


if __name__ == "__main__":
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = SquaredReluMLP().to(device)
    x = torch.randn(4, 32, 64, device=device, requires_grad=True)
    out = torch.compile(model, backend="mojo")(x)
    out.sum().backward()
    print(mojo_compile.last_report())
    ref_x = x.detach().clone().requires_grad_()
    ref = model(ref_x)
    ref.sum().backward()
    print("max |out - eager|:", (out - ref).abs().max().item(), " max |dx - eager|:",
          (x.grad - ref_x.grad).abs().max().item())
