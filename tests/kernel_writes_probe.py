"""Run by tests/test_kernel_writes.py in a fresh process with the interpreter off: every launcher is called on CPU
tensors in the configurations it can choose, its launches are recorded (not run), and torch's TTIR analysis of each
launch -- what Inductor's functionalization believes the kernel writes -- is compared with the kernel's @writes.
A stand-in driver gives Triton the sm_90 target, so no GPU is needed. Prints one line per distinct launch:
"OK name flags" or "BAD name flags: reason"."""
import dataclasses
import itertools
import sys

import torch
import triton
from triton.backends.compiler import GPUTarget


class _Sm90Driver:
    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)


triton.runtime.driver.set_active(_Sm90Driver())

from mojo_compile.kernels import (attention, attention_decode, cross_entropy, gated_act, layer_norm,  # noqa: E402
                                  rms_norm, rope)
from mojo_compile.kernels.common import declared_writes, inductor_accesses, record_launches  # noqa: E402
from mojo_compile.lowering.devices import DEVICES, assume  # noqa: E402

BF16, FP32 = torch.bfloat16, torch.float32


def _r(*shape, dtype=BF16):
    return torch.randn(*shape).to(dtype)


def rms_cases():
    for n, res, w, cast in itertools.product((64, 20000), (False, True), (False, True), ("normed", "output", "rstd")):
        x = _r(6, n)
        yield lambda: rms_norm.rms_norm_fwd(x, _r(6, n) if res else None, _r(n) if w else None, 1e-6, 0.0, cast,
                                            BF16)
    for n, w, dres, wg in itertools.product((64, 20000), (False, True), (False, True), (False, True)):
        x = _r(6, n)
        yield lambda: rms_norm.rms_norm_bwd(_r(6, n), x, _r(n) if w else None, torch.rand(6), _r(6, n) if dres
                                            else None, 0.0, "normed", wg)


def gated_cases():
    for act in ("silu", "gelu_tanh", "gelu"):
        g, u = _r(6, 40), _r(6, 40)
        yield lambda: gated_act.gated_act_fwd(g, u, act)
        yield lambda: gated_act.gated_act_bwd(_r(6, 40), g, u, act)
        for gate_first in (True, False):
            gu = _r(6, 80)
            yield lambda: gated_act.gated_act_fused_fwd(gu, act, gate_first)
            yield lambda: gated_act.gated_act_fused_bwd(_r(6, 40), gu, act, gate_first)


def rope_cases():
    """Every layout as planned for the CPU, and as planned for a device whose per-element addresses are scalar loads
    (Ascend: the PAIR_TILES kernels in every layout)."""
    no_gathers = dataclasses.replace(DEVICES["interpreter"], vector_gathers=False)
    for call in _rope_calls():
        yield call
        yield lambda call=call: _planned_for(no_gathers, call)


def _planned_for(caps, call):
    with assume(caps):
        call()


def _rope_calls():
    batch, seq, hq, hk = 3, 7, 4, 2
    for d, rot, interleaved, rotate_last, seq_dim, cos_batch in itertools.product(
            (16, 24), (16, 8), (False, True), (False, True), (1, 2), (1, 3)):
        if rot > d:
            continue
        shape = (batch, seq, hq, d) if seq_dim == 1 else (batch, hq, seq, d)
        kshape = (batch, seq, hk, d) if seq_dim == 1 else (batch, hk, seq, d)
        q, k = _r(*shape), _r(*kshape)
        cos, sin = _r(cos_batch, seq, rot, dtype=FP32), _r(cos_batch, seq, rot, dtype=FP32)
        yield lambda: rope.rope_fwd(q, k, cos, sin, rot, interleaved, seq_dim, rotate_last)
        yield lambda: rope.rope_bwd(q, k, cos, sin, rot, interleaved, seq_dim, rotate_last, BF16)
        for together in (False, True):
            width = (hq * d, hk * d) if together else (d, d)
            qw, kw = _r(width[0]), _r(width[1])
            yield lambda: rope.qk_norm_rope_fwd(q, k, qw, kw, 1e-6, "normed", cos, sin, rot, interleaved, seq_dim,
                                                together, rotate_last)
            rq = torch.rand((batch, seq) if together else (batch, seq, hq))
            rk = torch.rand((batch, seq) if together else (batch, seq, hk))
            yield lambda: rope.qk_norm_rope_bwd(q, k, q, k, qw, kw, rq, rk, "normed", cos, sin, rot, interleaved,
                                                seq_dim, together, rotate_last)


def attention_cases():
    batch, hq, hkv, s, d = 2, 4, 2, 9, 16
    q, k, v = _r(batch, hq, s, d), _r(batch, hkv, s, d), _r(batch, hkv, s, d)
    masks = {"none": None, "bool": torch.rand(batch, 1, s, s) > 0.3, "add": _r(batch, 1, s, s),
             "keys": torch.rand(batch, 1, 1, s) > 0.3}
    for (name, mask), causal, window, softcap, sinks, q_pos in itertools.product(
            masks.items(), (False, True), (0, 4), (0.0, 30.0), (None, _r(hq)), (None, torch.arange(s))):
        kwargs = dict(causal=causal, window=window, softcap=softcap, mask=mask, sinks=sinks, q_pos=q_pos)
        yield lambda: attention.attention_fwd(q, k, v, 0.25, **kwargs)
        out, lse = torch.randn(batch, hq, s, d).to(BF16), torch.randn(batch, hq, s)
        yield lambda: attention.attention_bwd(_r(batch, hq, s, d), q, k, v, out, lse, 0.25, **kwargs)
        for splits in (1, 3):
            yield lambda: attention_decode.attention_decode(q[:, :, -1:], k, v, 0.25, num_splits=splits,
                                                            **dict(kwargs, q_pos=None, mask=None if mask is None
                                                                   else mask[..., -1:, :]))


def cross_entropy_cases():
    for v, dtype in itertools.product((517, 50000), (BF16, FP32)):
        x, labels = _r(6, v, dtype=dtype), torch.randint(0, v, (6,))
        yield lambda: cross_entropy.cross_entropy_fwd(x, labels, -100)
        yield lambda: cross_entropy.cross_entropy_fwd(x, labels, -100, row_sum=torch.empty(6))  # label smoothing
        yield lambda: cross_entropy.cross_entropy_bwd(x, labels, torch.rand(6), torch.rand(6), torch.rand(6))
        yield lambda: cross_entropy.cross_entropy_bwd(x, labels, torch.rand(6), torch.rand(6), torch.rand(6),
                                                      c=torch.rand(6))


def layer_norm_cases():
    for n, dtype, (weighted, biased) in itertools.product((40, 5000), (BF16, FP32),
                                                         ((True, True), (True, False), (False, False))):
        x = _r(6, n, dtype=dtype)
        w, b = (_r(n, dtype=dtype) if weighted else None), (_r(n, dtype=dtype) if biased else None)
        yield lambda: layer_norm.layer_norm_fwd(x, w, b, 1e-5)
        yield lambda: layer_norm.layer_norm_bwd(_r(6, n, dtype=dtype), x, w, torch.rand(6), torch.rand(6), weighted,
                                                biased)
        yield lambda: layer_norm.add_layer_norm_fwd(x, _r(6, n, dtype=dtype), w, b, 1e-5)
        yield lambda: layer_norm.layer_norm_bwd(_r(6, n, dtype=dtype), x, w, torch.rand(6), torch.rand(6), weighted,
                                                biased, grad_residual=_r(6, n, dtype=dtype))


def _overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False
    def extent(t):
        if t.numel() == 0:
            return (0, 0)
        last = sum((n - 1) * st for n, st in zip(t.shape, t.stride())) + 1
        return (t.storage_offset(), t.storage_offset() + last)
    (a0, a1), (b0, b1) = extent(a), extent(b)
    return a0 < b1 and b0 < a1


# A planted kernel of the shape that broke RoPE under Inductor: a helper takes a read-only pointer and also returns
# the column index the store uses. The check must flag it; its repaired twin must pass.
import triton.language as tl  # noqa: E402

from mojo_compile.kernels.common import mismatch, writes  # noqa: E402


@triton.jit
def _index_and_value(X, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    return cols, tl.load(X + cols)


@writes("Y")
@triton.jit
def _planted(X, Y, BLOCK: tl.constexpr):
    cols, x = _index_and_value(X, BLOCK)
    tl.store(Y + cols, x * 2)


@writes("Y")
@triton.jit
def _repaired(X, Y, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    tl.store(Y + cols, tl.load(X + cols) * 2)


def selfcheck():
    x, y = torch.randn(16), torch.empty(16)
    planted = mismatch(_planted, dict(X=x, Y=y, BLOCK=16))
    repaired = mismatch(_repaired, dict(X=x, Y=y, BLOCK=16))
    print(("OK" if planted and not repaired else "BAD") + f" selfcheck planted={planted!r} repaired={repaired!r}")


@triton.jit
def _unmarked(X, Y, BLOCK: tl.constexpr):  # no @writes: not ours, so never memoized
    cols = tl.arange(0, BLOCK)
    tl.store(Y + cols, tl.load(X + cols))


def memocheck():
    """common.memoize_torch_analysis: each launch of ours analysed by torch once per specialisation, every answer
    equal to torch's own; a kernel without @writes analysed by torch at every call."""
    from torch._higher_order_ops import triton_kernel_wrap as tkw

    from mojo_compile.kernels.common import memoize_torch_analysis

    calls = []
    # torch >= 2.12 reports reads and writes; older torch (2.11) writes only, under another name
    name = "identify_accessed_tensors" if hasattr(tkw, "identify_accessed_tensors") else "identify_mutated_tensors"
    torchs = getattr(tkw, name)

    def counted(kernel, kwargs, *rest):
        calls.append(kernel)
        return torchs(kernel, kwargs, *rest)

    def answer(result):
        return result.read_writes if hasattr(result, "read_writes") else sorted(result)

    setattr(tkw, name, counted)
    memoize_torch_analysis()
    memoized = getattr(tkw, name)
    problems, launches = [], []
    for case in list(layer_norm_cases()) + list(attention_cases())[:6]:
        with record_launches() as recorded:
            case()
        launches += recorded
    for kernel, _grid, bound in launches:
        first, again = memoized(kernel, dict(bound), {}), memoized(kernel, dict(bound), {})
        own = torchs(kernel, dict(bound), {})
        if not (answer(first) == answer(own) == answer(again)):
            problems.append(f"{kernel.fn.__name__}: memoized {answer(first)} != torch's {answer(own)}")
    distinct = len(memoized.mojo_memo)
    if len(calls) != distinct or distinct < 4:
        problems.append(f"torch ran {len(calls)} analyses for {distinct} specialisations of {len(launches)} launches")
    x, y = torch.randn(16), torch.empty(16)
    for _ in range(2):
        memoized(_unmarked, dict(X=x, Y=y, BLOCK=16), {})
    if calls.count(_unmarked) != 2:
        problems.append(f"an unmarked kernel analysed {calls.count(_unmarked)} times in 2 calls")
    print(("BAD memocheck " + "; ".join(problems)) if problems else
          f"OK memocheck {len(launches)} launches, {distinct} analyses")


def aotcheck():
    """Through torch's own path: AOTAutograd traces a graph of ttx Mojo ops on fake CUDA tensors (twice: metadata,
    then the graph; torch wraps each traced launch that passes launch options in a fresh one-config Autotuner).
    Every TTIR generation must be a memo miss, and there must be at most two per kernel specialisation (the launcher's
    own write check, on stand-in values, and torch's functionalization), not one per launch."""
    from torch._functorch.aot_autograd import aot_function
    from torch._higher_order_ops import triton_kernel_wrap as tkw
    from torch._subclasses.fake_tensor import FakeTensorMode

    from mojo_compile.kernels.common import memoize_torch_analysis

    generated = []
    torchs = tkw.generate_ttir

    def counted(kernel, *args, **kwargs):
        generated.append(kernel)
        return torchs(kernel, *args, **kwargs)

    tkw.generate_ttir = counted
    memoize_torch_analysis()
    name = "identify_accessed_tensors" if hasattr(tkw, "identify_accessed_tensors") else "identify_mutated_tensors"
    memo = getattr(tkw, name).mojo_memo

    def graph(x, r, w, g, u):
        for _ in range(3):
            h, r, _ = torch.ops.mojo.add_rms_norm(x, r, w, 1e-5, target="ttx")
            x = torch.ops.mojo.gated_act(g * h, u, target="ttx") + h
        return torch.ops.mojo.rms_norm(x, w, 1e-5, target="ttx")[0]

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        x, r, g, u = (torch.randn(4, 256, device="cuda", dtype=BF16) for _ in range(4))
        w = torch.randn(256, device="cuda", dtype=BF16)
    kernels = set()

    def graph_of(gm, _inputs):
        kernels.update(n for n in gm.graph.nodes if "triton_kernel" in str(n.target))
        return gm

    with assume("H200"), torch.no_grad(), mode:
        aot_function(graph, fw_compiler=graph_of)(x, r, w, g, u)
    launches, specialisations = len(kernels), 3  # add_rms_norm, gated_act, rms_norm: one specialisation each
    problems = []
    if launches != 7:
        problems.append(f"{launches} launches in the traced graph, expected 7 (the ops not inlined?)")
    if len(generated) != len(memo) or len(generated) > 2 * specialisations:
        problems.append(f"torch generated TTIR {len(generated)} times for {launches} launches of {specialisations} "
                        f"specialisations ({len(memo)} memo entries)")
    print(("BAD aotcheck " + "; ".join(problems)) if problems else
          f"OK aotcheck {launches} launches, {len(generated)} TTIR generations")


def main():
    if sys.argv[1:] == ["aotcheck"]:
        return aotcheck()
    if sys.argv[1:] == ["selfcheck"]:
        return selfcheck()
    if sys.argv[1:] == ["memocheck"]:
        return memocheck()
    families = {"rms_norm": rms_cases, "gated": gated_cases, "rope": rope_cases, "attention": attention_cases,
                "cross_entropy": cross_entropy_cases, "layer_norm": layer_norm_cases}
    chosen = sys.argv[1:] or list(families)
    seen = set()
    for family in chosen:
        for case in families[family]():
            with record_launches() as launches:
                case()
            for kernel, _grid, bound in launches:
                # the launch's specialisation: its upper-case (constexpr and size) arguments
                flags = tuple(sorted((n, v) for n, v in bound.items()
                                     if n.isupper() and not isinstance(v, torch.Tensor)))
                key = (kernel.fn.__name__, kernel.fn.__module__, flags,
                       tuple((n, v.dtype) for n, v in bound.items() if isinstance(v, torch.Tensor)))
                if key in seen:
                    continue
                seen.add(key)
                name = f"{kernel.fn.__module__.rsplit('.', 1)[-1]}.{kernel.fn.__name__}"
                tensors = {n: v for n, v in bound.items() if isinstance(v, torch.Tensor)}
                declared = declared_writes(kernel, bound)
                problems = []
                read, written = inductor_accesses(kernel, bound)
                if written != declared:
                    problems.append(f"torch finds writes to {sorted(written)}, declared {sorted(declared)}")
                touched = written | read if read is not None else written  # older torch reports writes only
                for w in sorted(declared):  # a written buffer must not alias anything else the kernel touches
                    for other in sorted(touched - {w}):
                        if _overlaps(tensors[w], tensors[other]):
                            problems.append(f"written {w} overlaps {other}")
                label = " ".join(f"{n}={v}" for n, v in flags if n not in ("INTERPRET",))
                print(("BAD " if problems else "OK ") + name + " " + label + (": " + "; ".join(problems)
                                                                             if problems else ""), flush=True)


if __name__ == "__main__":
    main()
