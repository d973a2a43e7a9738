"""Lowering: which implementation runs each Mojo op.

A target is a table `op name -> Impl(fn, supports)` (see table.py). Three ship with mojo_compile:

    ttx        Triton kernels (NVIDIA GPUs; Ascend through triton-ascend; the CPU under TRITON_INTERPRET=1)
    torch_npu  Ascend's fused torch_npu ops
    torch      the pure-PyTorch reference, and the last fallback of every op on every target

A new accelerator needs only a new table: `register_target("my_npu", load_table)`. Every op's implementations,
the built-in families' included, are registered by the op's own module (ops/*.py):
`register_impl(op, target, fn, supports=...)`. Tables load lazily: a built-in target's table loads where its package
imports (ttx: triton and the kernel modules, torch_npu: torch_npu; an ImportError marks the target unavailable, with
its reason), so a target's imports are paid for only when it is used.

How an op reaches its implementation:
  * called directly (eager, or the eager inner compiler): the custom op's body calls `call()`, which checks
    `supports` on the real tensors and runs the target's fn or the torch reference;
  * under AOTAutograd (the Inductor inner compiler): `inline_in_inner_compiler` decomposes the op into its chosen
    implementation when that is traceable, like `torch.library.triton_op` does, so Inductor launches our Triton kernels
    from its own generated code (no custom-op dispatch per call) and fuses the torch reference with its neighbours.
"""
from __future__ import annotations

import functools
import importlib
import logging
import pkgutil
from typing import Callable, Optional, Sequence

import torch

from .. import tuner
from ..kernels.common import NotInlinable
from .table import Impl, Table, _always, _never, _silent

__all__ = ["Impl", "TRACEABLE", "register_target", "register_impl", "targets", "unavailable", "choose", "describe",
           "call", "check_target_name", "inductor_decompositions", "KEPT_WHOLE_UNDER_INDUCTOR",
           "inline_in_inner_compiler", "recompute_in_backward", "RECOMPUTED_IN_BACKWARD", "tag_recomputed"]

log = logging.getLogger("mojo_compile")

_LOADERS: dict[str, Callable[[], dict[str, Impl]]] = {}
_TABLES: dict[str, dict[str, Impl]] = {}
_UNAVAILABLE: dict[str, str] = {}
_LOGGED: set = set()


def register_target(name: str, load_table: Callable[[], dict[str, Impl]]) -> None:
    """Add a target. `load_table()` returns its table; an ImportError there marks the target unavailable."""
    _LOADERS[name] = load_table
    _TABLES.pop(name, None)
    _UNAVAILABLE.pop(name, None)


_PENDING: dict[str, dict[str, Impl]] = {}  # target -> op -> Impl registered before the target's table loaded


# For an implementation made of torch ops (the references, and a target that runs them): Inductor traces it and fuses
# it with its neighbours. `register_impl(op, "torch", fn, **TRACEABLE)`.
TRACEABLE = dict(traceable=lambda *args: True)


def register_impl(op: str, target: str, fn: Callable, *, supports: Callable[..., Optional[str]] = _always,
                  traceable: Callable[..., bool] = _never, describe: Callable[..., str] = _silent) -> Callable:
    """Register `fn` as the implementation of the Mojo op `op` on `target`, from the module that defines the op (a
    fusion of its own: see docs/adding-a-fusion.md). The "torch" implementation is required: it is every other
    target's fallback. A target whose table has not loaded yet (its imports are paid for only when used) gets the
    entry when it loads. Returns fn, so that it also works as `functools.partial(register_impl, op, target)`
    decorator-style."""
    impl = Impl(fn, supports, traceable, describe)
    table = _TORCH if target == "torch" else _TABLES.get(target)
    pending = _PENDING.setdefault(target, {})
    if op in pending or (table is not None and op in table):
        raise ValueError(f"mojo: {op!r} is implemented twice on target {target!r}")
    if table is not None:
        table[op] = impl
    else:
        pending[op] = impl
    return fn


# The built-in targets' tables, filled by the ops' modules. One object per target for the life of the process, so
# that a table loaded again (register_target anew) still holds the implementations registered into it.
_TORCH = Table("torch")  # the torch reference: every op's, and the last fallback of every other target
_BUILT_IN = {"torch": _TORCH, "ttx": Table("ttx"), "torch_npu": Table("torch_npu")}


def _built_in(target: str, needs: Callable[[], Sequence[str]] = lambda: ()) -> Callable[[], dict[str, Impl]]:
    """The loader of a built-in target's table: `needs()` names the modules it runs on, imported first (an
    ImportError marks the target unavailable, with that reason)."""
    def load() -> dict[str, Impl]:
        for module in needs():
            importlib.import_module(module)
        return _BUILT_IN[target]
    return load


def _triton_and_the_kernels() -> list[str]:
    """Triton, then every built-in kernel module: one that does not import with this Triton (too old for it, say)
    leaves the whole target unavailable, so every op falls back to torch with the reason, never fails at a call."""
    from .. import kernels
    return ["triton", *(f"{kernels.__name__}.{m.name}" for m in pkgutil.iter_modules(kernels.__path__))]


register_target("torch", _built_in("torch"))
register_target("ttx", _built_in("ttx", _triton_and_the_kernels))
register_target("torch_npu", _built_in("torch_npu", lambda: ["torch_npu"]))


def targets() -> list[str]:
    return list(_LOADERS)


def check_target_name(name: str) -> None:
    if name not in _LOADERS:
        raise ValueError(f"unknown mojo target {name!r}; known targets: {', '.join(_LOADERS)}")


def _table(name: str) -> Optional[dict[str, Impl]]:
    if name not in _TABLES and name not in _UNAVAILABLE:
        check_target_name(name)
        try:
            table = _LOADERS[name]()
            for op, impl in _PENDING.pop(name, {}).items():  # the implementations fusions registered meanwhile
                if op in table:
                    raise ValueError(f"mojo: {op!r} is implemented twice on target {name!r}")
                table[op] = impl
            _TABLES[name] = table
        except ImportError as e:  # never swallowed silently: `unavailable()` reports it and callers log or raise
            _UNAVAILABLE[name] = f"target {name!r} is unavailable: {e}"
    return _TABLES.get(name)


def unavailable(name: str) -> Optional[str]:
    """None if the target's table loads, else why not."""
    _table(name)
    return _UNAVAILABLE.get(name)


def _reason_not(op: str, target: str, args) -> Optional[str]:
    table = _table(target)
    if table is None:
        return _UNAVAILABLE[target]
    impl = table.get(op)
    if impl is None:
        return f"{target} has no implementation of {op}"
    return impl.supports(*args)


# Where a target cannot run an op on a device's tensors, the next target tried before the torch reference: on an
# Ascend NPU, Triton kernels (triton-ascend) fall back to torch_npu's fused ops.
FALLBACKS = {("ttx", "npu"): "torch_npu"}


def _device_type(args) -> Optional[str]:
    return next((a.device.type for a in args if isinstance(a, torch.Tensor)), None)


def _chain(target: str, args) -> list[str]:
    """The targets tried in order for `target` on these args, the torch reference last."""
    chain = [target]
    while chain[-1] != "torch":
        chain.append(FALLBACKS.get((chain[-1], _device_type(args)), "torch"))
    return chain


def _first_that_supports(op: str, target: str, args) -> tuple[str, Optional[str]]:
    """The first target of the chain that runs `op` on these args, and why `target` itself cannot (None if it
    can); each fallback is logged once."""
    chain = _chain(target, args)
    first_reason = None
    for current, following in zip(chain, chain[1:]):
        reason = _reason_not(op, current, args)
        if reason is None:
            return current, first_reason
        log_fallback_once(op, current, reason, following)
        first_reason = first_reason or reason
    return "torch", first_reason


def choose(op: str, target: str, *args) -> tuple[str, Optional[str]]:
    """At compile time: the target that will run `op` on these (fake) args, and why `target` can't, if it can't.
    MOJO_TUNE=1: where further targets of the chain (the reference aside) can run it too -- Triton kernels and
    torch_npu's fused ops on an NPU -- the fastest of them, timed once per shape bucket (tuner.py)."""
    chosen, reason = _first_that_supports(op, target, args)
    if chosen == "torch" or not tuner.enabled():
        return chosen, reason
    chain = _chain(target, args)
    others = [t for t in chain[chain.index(chosen) + 1:-1] if _reason_not(op, t, args) is None]
    return (_fastest(op, [chosen, *others], args) if others else chosen), reason


def _fastest(op: str, candidates: list[str], args) -> str:
    """The fastest of `candidates` (targets that all run `op` on these args) on fresh inputs of their metadata; the
    first where a size is symbolic."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if not all(isinstance(s, int) for t in tensors for s in t.shape):
        return candidates[0]
    key = tuner.bucket(*(v for a in args for v in ((*a.shape, a.dtype, a.stride() == a.contiguous().stride())
                                                       if isinstance(a, torch.Tensor) else (a,))))
    with tuner.real_tensors():
        fresh = [tuner.like(a) if isinstance(a, torch.Tensor) else a for a in args]
        timed = {t: functools.partial(_TABLES[t][op].fn, *fresh) for t in candidates}
        return tuner.choose(f"target:{op}", key, timed, candidates[0], tensors[0].device.type)


def describe(op: str, target: str, *args) -> str:
    """For the report: which kernel `target`'s implementation of `op` will run on these (fake) args, if it says."""
    impl = (_table(target) or {}).get(op)
    return impl.describe(*args) if impl is not None else ""


def log_once(message: str) -> None:
    """A warning said once per process (fallbacks happen per call; the log should say so once)."""
    if message not in _LOGGED:
        _LOGGED.add(message)
        log.warning(message)


def log_fallback_once(op: str, target: str, reason: str, to: str = "torch") -> None:
    log_once(f"mojo {op}: {target} falls back to {to}: {reason}")




def launch_directly():
    """Real tensors go straight to the Triton launcher, not through wrap_triton's tracing wrapper (like triton_op)."""
    try:
        from torch._library.triton import set_wrap_triton_enabled
    except ImportError:  # pragma: no cover - older torch
        import contextlib
        return contextlib.nullcontext()
    return set_wrap_triton_enabled(False)


def call(op: str, target: str, *args):
    """At run time: run `op` on `target`, or on its fallbacks (the torch reference last), each reason logged once."""
    chosen, _ = _first_that_supports(op, target, args)
    if chosen == "torch":
        return _TORCH[op].fn(*args)
    with launch_directly():
        return _TABLES[chosen][op].fn(*args)


def _traceable_impl(op: str, target: str, args) -> Optional[Callable]:
    """The implementation `call()` would run on these (fake) args, if it can be traced; else None."""
    chosen, _ = _first_that_supports(op, target, args)
    impl = _TORCH[op] if chosen == "torch" else _TABLES[chosen][op]
    return impl.fn if impl.traceable(*args) else None


def inline_in_inner_compiler(op_def, name: str) -> None:
    """Under AOTAutograd's functionalization (what Inductor compiles), replace calls of the custom op `op_def` by the
    traced body of its implementation on the op's `target`. Not under torch.export, which keeps custom ops whole."""
    from torch._subclasses.functional_tensor import FunctionalTensorMode

    schema = op_def._opoverload._schema
    assert schema.arguments[-1].name == "target", f"{name}: `target` must be the last argument"

    def decompose(mode, func, types, args, kwargs):
        try:
            from torch.export._trace import custom_triton_ops_decomposition_disabled
            keep_whole = custom_triton_ops_decomposition_disabled()
        except ImportError:  # pragma: no cover
            keep_whole = False
        values = dict(zip((a.name for a in schema.arguments), args))
        values.update(kwargs)
        bound = [values.get(a.name, a.default_value) for a in schema.arguments]
        target = values.get("target", "torch")
        fn = None if keep_whole else _traceable_impl(name, target, bound[:-1])
        if fn is not None:
            try:
                with mode:
                    return fn(*bound[:-1])
            except NotInlinable as e:  # kept whole: launched directly at run time (kernels/common.py)
                log_once(f"mojo {name}: not inlined into Inductor's graph: {e}")
        return mode.__torch_dispatch__(func, types, args, kwargs)

    op_def.register_torch_dispatch(FunctionalTensorMode, decompose)


# aten ops the Inductor inner compiler calls whole (eager's kernel) instead of decomposing, and why.
KEPT_WHOLE_UNDER_INDUCTOR = {
    "embedding_dense_backward": (
        "Inductor's decomposition adds every token's gradient into an fp32 [V, H] buffer by atomics, then casts it: "
        "2 GiB at a 128K x 4096 vocabulary, and an order that changes from run to run. Eager's CUDA kernel sorts the "
        "indices, sums each row's tokens (fp32) and writes the [V, H] gradient in its dtype: the memory of the "
        "gradient alone, the same sums every run."),
}


# A custom op, not the aten op left undecomposed: Inductor has its own decomposition of it and (torch 2.11) refuses
# to fall back on an op it has one for; a custom op it always calls as an extern kernel.
@torch.library.custom_op("mojo::embedding_dense_backward", mutates_args=())
def embedding_dense_backward(grad_output: torch.Tensor, indices: torch.Tensor, num_weights: int, padding_idx: int,
                             scale_grad_by_freq: bool) -> torch.Tensor:
    """aten.embedding_dense_backward, eager's kernel."""
    return torch.ops.aten.embedding_dense_backward.default(grad_output, indices, num_weights, padding_idx,
                                                           scale_grad_by_freq)


@embedding_dense_backward.register_fake
def _(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    return grad_output.new_empty((num_weights, *grad_output.shape[indices.dim():]))


def _embedding_dense_backward_whole(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    return embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)


def inductor_decompositions() -> dict:
    """Inductor's decomposition table, with the ops of KEPT_WHOLE_UNDER_INDUCTOR decomposed into custom ops that
    call their eager kernels (Inductor launches those as extern kernels)."""
    from torch._inductor.decomposition import select_decomp_table

    return {**select_decomp_table(), torch.ops.aten.embedding_dense_backward.default: _embedding_dense_backward_whole}


# Inductor settings for a rewritten graph, under the user's own (theirs win). A Mojo op inlined under Inductor is a
# user-defined Triton kernel to it, and Inductor starts those with Triton's launcher, a C file built by the C compiler
# once per kernel signature at the first compile (7 builds, 2.5 s of a Llama decode step's first compile on the H200).
# Its static launcher, which starts Inductor's own kernels, needs no build. Inductor falls back to Triton's launcher,
# kernel by kernel, where the static one cannot start a kernel (it logs why).
INDUCTOR_DEFAULTS = {"static_launch_user_defined_triton_kernels": True}


def inductor_config(user: dict) -> dict:
    """The config patches for Inductor's compile of a rewritten graph: INDUCTOR_DEFAULTS that this torch knows,
    then `user` (the Inductor options the user passed) over them."""
    from torch._inductor import config

    known = {key: value for key, value in INDUCTOR_DEFAULTS.items() if hasattr(config, key)}
    return {**known, **user}


# Mojo ops whose outputs the backward recomputes instead of keeping them from the forward (the op -> why), as
# Inductor's partitioner does for an unfused elementwise chain. Registered beside each op's definition.
RECOMPUTED_IN_BACKWARD: dict = {}


def recompute_in_backward(op_def, why: str) -> None:
    """Mark a Mojo op to be recomputed in the backward: its outputs are not saved between forward and backward.
    For ops that are cheap (elementwise) and whose own backward saves their inputs anyway, so recomputing them
    reads what is kept already and saves their outputs' memory."""
    RECOMPUTED_IN_BACKWARD[op_def._opoverload] = why


def tag_recomputed(gm) -> int:
    """Give each node of a RECOMPUTED_IN_BACKWARD op the activation-checkpoint policy PREFER_RECOMPUTE: the tag
    torch.utils.checkpoint's selective policy sets, which AOTAutograd copies onto the joint graph's nodes traced
    from it and its partitioner honours. Returns how many nodes were tagged."""
    from torch.utils.checkpoint import CheckpointPolicy

    tagged = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in RECOMPUTED_IN_BACKWARD:
            node.meta["recompute"] = CheckpointPolicy.PREFER_RECOMPUTE
            tagged += 1
    return tagged
