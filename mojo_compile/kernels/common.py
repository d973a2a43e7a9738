"""What every kernel file shares: how a kernel is launched, and what each kernel declares it writes.

Why the declaration. Under the Inductor inner compiler a Mojo op is replaced by the traced body of its launcher
(lowering/__init__.py), so each launch becomes a `triton_kernel_wrapper_mutation` node. Functionalization needs to
know which pointer arguments the kernel writes, and torch finds out by a dataflow analysis of the kernel's TTIR
(`torch._higher_order_ops.triton_kernel_wrap`). That analysis follows every operand backwards from each store's
pointer, and it treats a `tt.call` result as depending on *all* the call's arguments. So a helper that takes the
cos pointer and also returns a column index used in a store address makes cos "written". Functionalization then
clones cos, and after the launch scatters the clone back into cos's base. When the argument is an expanded view
(cos [1, S, R] broadcast over the batch with stride 0), that scatter back is a sum over the batch: with batch > 1
the next layer reads a corrupted table. The interpreter never traces, and the eager inner compiler launches the
kernel directly, so neither sees it: only the compiled kernel under Inductor does.

So each kernel names the arguments it stores to (`@writes(...)`), and a traced launch checks torch's analysis
against that list. If torch says the kernel writes anything else, the launch raises `NotInlinable` and the op is
kept whole (one opaque custom op in Inductor's graph, launched directly at run time), with the reason logged once.
tests/test_kernel_writes.py runs the analysis on every kernel in every configuration the launchers choose, on the
CPU, and requires it to equal the declaration, and no written argument to overlap another argument.
"""
from __future__ import annotations

import contextlib
import copy
import os
import sys
from typing import Callable, Optional

import torch

try:  # the lowering imports this module on every target; Triton is needed only to launch
    import triton
    import triton.language as tl
    try:  # triton-ascend: its generic libdevice is stubs; the Ascend one has the math (docs/ascend.md)
        from triton.language.extra.ascend import libdevice
    except ImportError:
        from triton.language.extra import libdevice
    jit = triton.jit
except ImportError:  # pragma: no cover
    triton = None

    def jit(fn):  # without Triton the helpers below are plain functions, never called
        return fn

__all__ = ["NotInlinable", "writes", "declared_writes", "wrap_triton", "interpreting", "as_bytes", "size_hint",
           "device_caps", "few_rows_config", "pipeline_stages", "PIPELINE_RESERVE", "contiguous_rows", "rows",
           "inductor_accesses", "inductor_writes", "mismatch", "record_launches", "ACT_CODES", "CAST_CODES",
           "round_to", "expf", "logf", "tanhf", "tanh_exp2", "exp_units", "normalise", "FLOAT_DTYPES", "ttx_traceable",
           "ttx_device_reason", "ttx_device_type_reason", "triton_backends", "ttx_elementwise_reason",
           "TTX_DEVICE_BACKENDS", "TRITON_ASCEND"]


class NotInlinable(RuntimeError):
    """A traced launch whose kernel Inductor would misread: the op is kept whole instead of inlined."""


def interpreting() -> bool:
    knobs = getattr(triton, "knobs", None)
    if knobs is not None and hasattr(knobs, "runtime"):
        return bool(knobs.runtime.interpret)
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


# ------------------------------------------------------------------ what the ttx target's implementations check
# Shared by the families' `supports` / `traceable` predicates on the ttx target (registered in ops/*.py).
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def ttx_traceable(*args) -> bool:
    """Inductor launches the kernels itself, except under the interpreter (it cannot run on fake tensors) and where
    a row width the launch configuration depends on is symbolic (block sizes are compile-time constants)."""
    if interpreting():
        return False
    return all(isinstance(t.shape[-1], int) for t in args if isinstance(t, torch.Tensor) and t.dim() > 0)


# The Triton backend each device's tensors need: NVIDIA's Triton for CUDA, triton-ascend (which installs as `triton`)
# for Ascend's npu tensors.
TTX_DEVICE_BACKENDS = {"cuda": "nvidia", "npu": "ascend"}


def triton_backends() -> frozenset:
    """The backends of the installed Triton ("nvidia", "amd"; "ascend" for triton-ascend)."""
    try:
        from triton.backends import backends
    except ImportError:
        return frozenset()
    return frozenset(backends)


# Kernels compiled by triton-ascend (a front end of Triton 3.2) where a construct must be spelled its way.
TRITON_ASCEND = tl.constexpr("ascend" in triton_backends()) if triton is not None else False


def ttx_device_type_reason(device_type: str) -> Optional[str]:
    """None if the ttx kernels run on tensors of this device type with the installed Triton, else why not."""
    if device_type == "cpu":
        return None if interpreting() else ("ttx runs on CUDA tensors; these are on the CPU (set TRITON_INTERPRET=1 "
                                            "to interpret the kernels)")
    backend = TTX_DEVICE_BACKENDS.get(device_type)
    if backend is None:
        return f"ttx does not run on {device_type} tensors"
    if backend not in triton_backends():
        return (f"ttx runs on {device_type} tensors through Triton's {backend} backend, which the installed Triton "
                f"does not have ({', '.join(sorted(triton_backends())) or 'none'})")
    return None


def ttx_device_reason(t: torch.Tensor):
    return ttx_device_type_reason(t.device.type)


def ttx_elementwise_reason(*tensors):
    """Tensors the elementwise kernels take: same shape and float dtype, unit stride in the last dim."""
    reason = ttx_device_reason(tensors[0])
    if reason:
        return reason
    if tensors[0].dtype not in FLOAT_DTYPES:
        return f"dtype {tensors[0].dtype} is not fp16/bf16/fp32"
    for t in tensors:
        if t.dim() == 0:
            return "a 0-d input"
        if t.stride(-1) != 1 and t.numel() > 1:
            return "the last dim is strided"
        if t.device != tensors[0].device:
            return "inputs on different devices"
    return None


def _base_fn(kernel):
    return getattr(kernel, "fn", kernel)


def writes(*always: str, **when) -> Callable:
    """Decorator, outermost on a @triton.jit kernel: the pointer arguments the kernel stores to. `always` are
    written by every launch; `when` maps an argument written only in some specialisations to the constexpr flag
    that turns its store on, or to a predicate on the bound arguments."""
    def mark(kernel):
        unknown = [n for n in (*always, *when) if n not in kernel.arg_names]
        flags = [f for f in when.values() if isinstance(f, str) and f not in kernel.arg_names]
        if unknown or flags:
            raise ValueError(f"{_base_fn(kernel).__name__}: @writes names {unknown + flags}, not arguments of the "
                             "kernel")
        kernel.mojo_writes = (frozenset(always), dict(when))
        return kernel
    return mark


def declared_writes(kernel, bound: Optional[dict] = None) -> frozenset:
    """The arguments a launch of `kernel` with `bound` arguments writes (every candidate when `bound` is None)."""
    declared = getattr(kernel, "mojo_writes", None)
    if declared is None:
        raise ValueError(f"kernel {_base_fn(kernel).__name__} declares no @writes(...)")
    always, when = declared
    if bound is None:
        return always | frozenset(when)
    on = {name for name, flag in when.items() if (bound[flag] if isinstance(flag, str) else flag(bound))}
    return always | frozenset(on)


# ------------------------------------------------------------------------------------------------ torch's analysis
def _analysis_args(kernel, args, kwargs) -> dict:
    bound = dict(zip(kernel.arg_names, args))
    bound.update(kwargs)
    return bound


def inductor_accesses(kernel, bound: dict) -> Optional[tuple[frozenset, frozenset]]:
    """(read, written): the tensor arguments torch's TTIR analysis says `kernel` reads and writes when launched with
    `bound` (None when this torch has no such analysis; reads are None when it reports writes only). Launch options
    (num_warps ...) may be in `bound`; torch drops them itself."""
    try:
        from torch._higher_order_ops import triton_kernel_wrap as tkw
    except ImportError:  # pragma: no cover
        return None
    tensors = {name for name, value in bound.items() if isinstance(value, torch.Tensor)}
    if hasattr(tkw, "identify_accessed_tensors"):
        accesses = tkw.identify_accessed_tensors(kernel, dict(bound), {})
        read = frozenset(dep.name for dep in accesses.read_writes.reads) & tensors
        written = {dep.name for dep in accesses.read_writes.writes}
    elif hasattr(tkw, "identify_mutated_tensors"):  # older torch: writes only
        read, written = None, set(tkw.identify_mutated_tensors(kernel, dict(bound), {}))
    else:  # pragma: no cover
        return None
    return read, frozenset(written & tensors)


def inductor_writes(kernel, bound: dict) -> Optional[frozenset]:
    accesses = inductor_accesses(kernel, bound)
    return None if accesses is None else accesses[1]


def _analysis_key(kernel, bound: dict):
    """What the analysis depends on: the kernel, each tensor's dtype, each other value (constexprs, and ints, which
    Triton specialises when 1 or a multiple of 16). As torch's TTIR generation sees them: a traced tensor or an
    Inductor buffer (TensorBox) is a 2-element tensor of its dtype, a symbolic value is 2."""
    import sympy

    inductor_ir = sys.modules.get("torch._inductor.ir")

    def key(value):
        if isinstance(value, torch.Tensor) or (inductor_ir is not None and isinstance(value, inductor_ir.TensorBox)):
            return ("tensor", value.dtype)
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)) or isinstance(value, sympy.Expr):
            return ("symbolic",)
        return ("value", type(value).__name__, repr(value))
    return (_kernel_key(kernel), tuple((name, key(value)) for name, value in bound.items()))


def _jit_function(kernel):
    """Our @triton.jit kernel, under the one-config Autotuner that torch wraps a traced launch in when the launch
    passes options (num_warps ...): a new wrapper per launch, each with our kernel as its `fn`."""
    from triton.runtime.autotuner import Autotuner

    return kernel.fn if isinstance(kernel, Autotuner) else kernel


def _kernel_key(kernel):
    """The kernel as the analysis sees it: our JIT function, and an Autotuner wrapper's configs (torch's analysis
    adds the first config's kwargs to the launch's; every field of every config is kept, to be exact)."""
    base = _jit_function(kernel)
    if base is kernel:
        return (id(kernel),)
    return (id(base), type(kernel).__name__,
            tuple(repr(sorted(vars(config).items())) for config in getattr(kernel, "configs", ())))


def memoize_torch_analysis() -> None:
    """Make torch's TTIR analysis of our kernels (`identify_accessed_tensors`) compute once per kernel and
    specialisation (`_analysis_key`) in a process. torch runs it afresh at every traced launch: AOTAutograd traces
    the graph twice (metadata, then the graph) and Inductor a third time as it lowers, and each run compiles the
    kernel to TTIR, a large part of a compile's time. The result depends on nothing the key leaves out, so each
    caller gets what torch itself computes. Other kernels go straight to torch's analysis."""
    try:
        from torch._higher_order_ops import triton_kernel_wrap as tkw
    except ImportError:  # pragma: no cover
        return
    name = "identify_accessed_tensors" if hasattr(tkw, "identify_accessed_tensors") else "identify_mutated_tensors"
    analyse = getattr(tkw, name, None)
    if analyse is None or getattr(analyse, "mojo_memo", None) is not None:
        return
    memo: dict = {}

    def memoized(kernel, kwargs, *rest):
        if getattr(_jit_function(kernel), "mojo_writes", None) is None:  # not ours: torch's own, every time
            return analyse(kernel, kwargs, *rest)
        key = (_analysis_key(kernel, kwargs), repr(rest))
        if key not in memo:
            memo[key] = analyse(kernel, kwargs, *rest)
        return copy.deepcopy(memo[key])  # the caller's own, as torch's would be

    memoized.mojo_memo = memo
    setattr(tkw, name, memoized)  # callers look it up in the module at each call


def _stand_in(value):
    """What the analysis is given for a traced value: a tensor of the dtype (it reads nothing else), 2 for a
    symbolic int (as torch itself does)."""
    if isinstance(value, torch.Tensor):
        with torch._C._DisableTorchDispatch():
            return torch.empty(2, dtype=value.dtype, device="cpu")
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return 2
    return value


_VERDICTS: dict = {}


def mismatch(kernel, bound: dict) -> Optional[str]:
    """Why torch's analysis of this launch disagrees with the kernel's declared writes, or None if it agrees."""
    key = _analysis_key(kernel, bound)
    if key not in _VERDICTS:
        try:
            written = inductor_writes(kernel, {name: _stand_in(v) for name, v in bound.items()})
        except Exception as e:  # noqa: BLE001 - a failed analysis makes torch assume every input written
            written, reason = None, f"torch's analysis of {_base_fn(kernel).__name__} failed: {e!r}"
        else:
            reason = None
        declared = declared_writes(kernel, bound)
        if written is not None and written != declared:
            reason = (f"torch's analysis of {_base_fn(kernel).__name__} finds writes to {sorted(written)}, the "
                      f"kernel writes {sorted(declared)}")
        _VERDICTS[key] = reason
    return _VERDICTS[key]


# ------------------------------------------------------------------------------------------------------ launching
_RECORDER: Optional[list] = None


@contextlib.contextmanager
def record_launches():
    """Within this block launches are recorded, not run: yields a list of (kernel, grid, bound arguments)."""
    global _RECORDER
    previous, _RECORDER = _RECORDER, []
    try:
        yield _RECORDER
    finally:
        _RECORDER = previous


def _traced(values) -> bool:
    return any(isinstance(v, torch.Tensor) and type(v) is not torch.Tensor and
               not isinstance(v, torch.nn.Parameter) for v in values)


class _Launcher:
    def __init__(self, kernel, grid):
        self.kernel, self.grid = kernel, grid

    def __call__(self, *args, **kwargs):
        kernel = self.kernel
        if _RECORDER is not None:
            _RECORDER.append((kernel, self.grid, _analysis_args(kernel, args, kwargs)))
            return None
        if interpreting():  # nothing traces the interpreter (and torch 2.11 refuses its kernel objects)
            return kernel[self.grid](*args, **kwargs)
        if _traced(list(args) + list(kwargs.values())):
            memoize_torch_analysis()
            reason = mismatch(kernel, _analysis_args(kernel, args, kwargs))
            if reason is not None:
                raise NotInlinable(reason)
        return torch.library.wrap_triton(kernel)[self.grid](*args, **kwargs)


class _Wrapped:
    def __init__(self, kernel):
        declared_writes(kernel)  # every kernel declares what it writes: raises, naming the kernel, if not
        self.kernel = kernel

    def __getitem__(self, grid):
        return _Launcher(self.kernel, grid)


def wrap_triton(kernel):
    """`wrap_triton(kernel)[grid](...)`: launches through `torch.library.wrap_triton`, so Inductor can inline them
    (lowering/__init__.py), after checking a traced launch's writes (module docstring)."""
    return _Wrapped(kernel)


# ------------------------------------------------------------------------------------------------------ small helpers
def as_bytes(mask: torch.Tensor) -> torch.Tensor:
    """A bool tensor as uint8 for a kernel argument: a free view on a plain tensor; a conversion on any tensor
    subclass (fake / functional while traced: Inductor cannot lower a view of bool as another dtype, and fuses the
    conversion into the mask's producer)."""
    return mask.view(torch.uint8) if type(mask) is torch.Tensor else mask.to(torch.uint8)


def rows(t: torch.Tensor) -> torch.Tensor:
    """[..., N] as [M, N], M the product of the leading dims (a view where they merge). Not reshape(-1, N): with
    N = 0 (an empty hidden size) torch cannot infer the -1."""
    return t.flatten(0, -2) if t.dim() > 1 else t.unsqueeze(0)


def contiguous_rows(t: torch.Tensor) -> torch.Tensor:
    """[..., N] as a contiguous [M, N] (a view when it already is): the row kernels index rows * N + cols."""
    return rows(t).contiguous()


def size_hint(n, fallback: int = 4096) -> int:
    """A concrete value of a possibly symbolic size, to pick a launch config only: every config is correct for every
    size, so no guard is wanted (a branch on a SymInt would install one)."""
    if isinstance(n, int):
        return n
    try:
        from torch.fx.experimental.symbolic_shapes import optimization_hint
        return int(optimization_hint(n, fallback=fallback))
    except ImportError:  # older torch
        hint = getattr(n.node, "hint", None)
        return int(hint) if hint is not None else fallback


def device_caps(device: torch.device):
    """The DeviceCaps a launch on `device` plans with (lowering/devices.py): cores, grid limit, on-chip buffer."""
    from ..lowering.devices import device_caps as caps  # here, not at the top: lowering imports this module
    return caps(device, interpreting())


def few_rows_config(m, block_m: int, block_n: int, sm_count: int) -> Optional[tuple[int, int]]:
    """(BLOCK_M 1, num_warps) for a row kernel whose static row count `m` gives fewer blocks of block_m rows than
    SMs (a decode step): one row per program and more warps, since latency, not bandwidth, decides there. None
    otherwise, and for a symbolic m (a branch on it would install a guard)."""
    if isinstance(m, int) and (m + block_m - 1) // block_m < sm_count:
        return 1, min(16, max(4, block_n // 256))
    return None


# What a pipelined loop leaves free of shared memory: the reductions' and layout conversions' scratch.
PIPELINE_RESERVE = 32 * 1024


def pipeline_stages(caps, stages: int, stage_bytes: int) -> int:
    """`stages` for a loop whose loads are pipelined (`tl.range(..., num_stages=stages)`), fewer where that many
    blocks of the streamed inputs (`stage_bytes` a block) would not fit in a program's shared memory beside
    PIPELINE_RESERVE: a tuned config from bf16 at fp32 would not launch ("out of resource: shared memory")."""
    return max(1, min(stages, (caps.onchip_bytes - PIPELINE_RESERVE) // max(1, stage_bytes)))


# --------------------------------------------------------------------------------------------------- kernel codes
ACT_CODES = {"silu": 0, "gelu_tanh": 1, "gelu": 2}  # gated activations: the kernels' ACT constexpr
CAST_CODES = {"normed": 0, "output": 1, "rstd": 2}  # where an RMSNorm rounds to the input dtype: the CAST constexpr


# ---------------------------------------------------------------------------------------------- Triton functions
# Device functions every kernel file may call (Triton inlines them into the calling kernel). Where the interpreter
# and the GPU differ (libdevice, bf16 rounding), the INTERPRET constexpr picks the path.
LOG2E = tl.constexpr(1.4426950408889634) if triton is not None else 1.4426950408889634


@jit
def round_to(x, DTYPE: tl.constexpr, INTERPRET: tl.constexpr):
    """fp32 x rounded to DTYPE (to nearest even). The interpreter truncates fp32 -> bf16, so round by hand there."""
    if INTERPRET and DTYPE == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        x = bits.to(tl.float32, bitcast=True)
    return x.to(DTYPE)


@jit
def expf(x, INTERPRET: tl.constexpr):
    if INTERPRET:
        return tl.exp(x)
    else:
        return libdevice.exp(x)  # expf, as torch's kernels; tl.exp is ex2.approx based


@jit
def logf(x, INTERPRET: tl.constexpr):
    if INTERPRET:
        return tl.log(x)
    else:
        return libdevice.log(x)  # logf, as torch's kernels


@jit
def tanhf(x, INTERPRET: tl.constexpr):
    if INTERPRET:
        # tanh(|x|) = (1 - e) / (1 + e), e = exp(-2|x|) in fp64: no overflow, and nearly correctly rounded
        ax = tl.where(x < 0, -x, x).to(tl.float64)
        e = tl.exp(-2.0 * ax)
        t = ((1.0 - e) / (1.0 + e)).to(tl.float32)
        return tl.where(x < 0, -t, t)
    else:
        return libdevice.tanh(x)


@jit
def gated_activation(g, ACT: tl.constexpr, INTERPRET: tl.constexpr):
    """act(g) in fp32 for ACT = ACT_CODES[act], spelled as ATen's kernels spell it (gated_act's and linear's
    kernels)."""
    if ACT == 0:
        return tl.math.div_rn(g, 1.0 + expf(-g, INTERPRET))
    elif ACT == 1:
        inner = 0.7978845834732056 * (g + 0.044714998453855515 * (g * g * g))
        return 0.5 * g * (1.0 + tanhf(inner, INTERPRET))
    else:
        return g * 0.5 * (1.0 + tl.math.erf(g * 0.7071067690849304))


@jit
def tanh_exp2(x):
    """tanh from exp2 of a non-positive argument (no overflow); core tl has no tanh that runs in the interpreter."""
    e = tl.exp2(tl.abs(x) * (-2.0 * LOG2E))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0, -t, t)


@jit
def exp_units(x, NATURAL: tl.constexpr):
    """exp of a difference of scores in the softmax's units."""
    if NATURAL:
        return tl.exp2(x * LOG2E)
    return tl.exp2(x)


@jit
def normalise(x, rstd, w, weight_offset, IN_DTYPE: tl.constexpr, HAS_W: tl.constexpr, CAST: tl.constexpr,
               INTERPRET: tl.constexpr):
    if CAST == 2:  # "rstd": x * rstd.to(dtype), a product in the input dtype
        y = round_to(x * round_to(rstd, IN_DTYPE, INTERPRET).to(tl.float32), IN_DTYPE, INTERPRET).to(tl.float32)
    elif CAST == 0:  # "normed": round the normalised value before the weight multiply
        y = round_to(x * rstd, IN_DTYPE, INTERPRET).to(tl.float32)
    else:  # "output": fp32 throughout
        y = x * rstd
    if HAS_W:
        y = y * (w + weight_offset)
    return y
