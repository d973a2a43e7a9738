"""A seeded fuzzer over the spellings the patterns know: each case perturbs one (keyword arguments, dims, casts,
scalars, operand order, mask formulas), compiles it with backend="mojo" and requires eager's numbers, fused or not,
and no crash. Bounded in time: MOJO_FUZZ_SECONDS (default 60 in CI; `MOJO_FUZZ_SECONDS=600 pytest
tests/test_fuzz_spellings.py` for a longer run), MOJO_FUZZ_SEED picks the sequence. A failure prints the case.

Tolerances: fp32 cases compare at 1e-5 (the fused ops compute in fp32 as eager does, in another order); bf16 cases
at 2 bf16 ulps (2**-7 relative), the output being rounded once from fp32 by both. The one exception is attention
written out in bf16 (`q @ k.transpose(-1, -2)`, softmax, `@ v`): eager rounds the scores to bf16 before the softmax,
the op does not, so the two differ by more than the output's rounding; such a case must be as accurate as eager
against an fp64 run of the same function (within 1.5x eager's error + 1e-6: a draw where eager's roundings happen
to cancel is not the op's error), as tests/test_attention.py asks of HF's eager attention."""
from __future__ import annotations

import os
import random
import time

import pytest
import torch
import torch.nn.functional as F

import mojo_compile
from conftest import DEVICE

SECONDS = float(os.environ.get("MOJO_FUZZ_SECONDS", "60"))
SEED = int(os.environ.get("MOJO_FUZZ_SEED", "0"))
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=2 ** -7, atol=2 ** -7)}


# ------------------------------------------------------------------------------------------------------ spellings
def near(rng: random.Random, canonical, *misses):
    """A near-miss knob: the canonical spelling three times in four, else one of the perturbations."""
    return canonical if not misses or rng.random() < 0.75 else rng.choice(misses)


def norm_case(rng: random.Random):
    dtype = rng.choice([torch.float32, torch.bfloat16])
    eps = rng.choice([1e-6, 1e-5, 0.1])
    weight_side = rng.choice(["left", "right", "none", "gemma"])
    cast = rng.choice(["normed", "output", "none"])
    mean_dim = near(rng, -1, 0, 1)
    keepdim = near(rng, True, False)
    power = near(rng, 2, 3)
    inverse = near(rng, "rsqrt", "pow", "div_sqrt")
    alpha = near(rng, None, 1, 2.0, -1)
    mean_kw = near(rng, {}, {"dtype": torch.float64})
    residual = rng.choice([False, True])
    x = torch.randn(3, 5, 16, device=DEVICE).to(dtype)
    r = torch.randn(3, 5, 16, device=DEVICE).to(dtype)
    w = (1 + 0.1 * torch.randn(16, device=DEVICE)).to(rng.choice([dtype, torch.float32]))

    def fn(x, r, w):
        h = (torch.add(x, r) if alpha is None else torch.add(x, r, alpha=alpha)) if residual else x
        h32 = h.float() if cast != "none" else h
        ms = h32.pow(power).mean(mean_dim, keepdim=keepdim, **mean_kw)
        if not keepdim:
            ms = ms.unsqueeze(mean_dim)
        inv = {"rsqrt": lambda t: torch.rsqrt(t + eps), "pow": lambda t: torch.pow(t + eps, -0.5),
               "div_sqrt": lambda t: 1.0 / torch.sqrt(t + eps)}[inverse](ms)
        y = h32 * inv
        if cast == "normed":
            y = y.to(h.dtype)
        if weight_side == "left":
            y = w * y
        elif weight_side == "right":
            y = y * w
        elif weight_side == "gemma":
            y = y * (1.0 + w.float())
        if cast == "output":
            y = y.to(h.dtype)
        return (y, h) if residual else y

    desc = dict(family="norm", dtype=dtype, eps=eps, weight=weight_side, cast=cast, dim=mean_dim, keepdim=keepdim,
                power=power, inverse=inverse, alpha=alpha, mean_kw=mean_kw, residual=residual, w=w.dtype)
    return fn, (x, r, w), dtype, desc


def rotate_half(x, split):
    return torch.cat((-x[..., split:], x[..., :split]), dim=-1)


def rope_case(rng: random.Random):
    dtype = rng.choice([torch.float32, torch.bfloat16])
    d = 16
    split = near(rng, d // 2, d // 4)
    sign = near(rng, 1, -1)
    layout = rng.choice(["bhsd", "bshd"])
    unsqueeze_dim = near(rng, 1 if layout == "bhsd" else 2, 2 if layout == "bhsd" else 1)
    swap = rng.random() < 0.1  # sin and cos exchanged
    alpha = near(rng, None, 1, -1, 2)
    cos_batch = rng.choice([1, 2])
    cos_dtype = rng.choice([dtype, torch.float32])
    shape = (2, 4, 5, d) if layout == "bhsd" else (2, 5, 4, d)
    kshape = (2, 2, 5, d) if layout == "bhsd" else (2, 5, 2, d)
    q, k = torch.randn(*shape, device=DEVICE).to(dtype), torch.randn(*kshape, device=DEVICE).to(dtype)
    cos = torch.randn(cos_batch, 5, d, device=DEVICE).to(cos_dtype)
    sin = torch.randn(cos_batch, 5, d, device=DEVICE).to(cos_dtype)

    def fn(q, k, cos, sin):
        c, s = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
        if swap:
            c, s = s, c

        def embed(x):
            a, b = x * c, sign * rotate_half(x, split) * s
            return a + b if alpha is None else torch.add(a, b, alpha=alpha)
        return embed(q), embed(k)

    desc = dict(family="rope", dtype=dtype, split=split, sign=sign, layout=layout, unsqueeze=unsqueeze_dim,
                swap=swap, alpha=alpha, cos_batch=cos_batch, cos_dtype=cos_dtype)
    return fn, (q, k, cos, sin), dtype, desc


def gated_case(rng: random.Random):
    dtype = rng.choice([torch.float32, torch.bfloat16])
    act = rng.choice(["silu", "gelu", "gelu_tanh", "relu", "sigmoid"])
    order = rng.choice(["act_first", "up_first"])
    fused = rng.choice([False, True])
    chunk_dim = near(rng, -1, 0)
    combine = near(rng, "mul", "add")
    x = torch.randn(4, 6, 32, device=DEVICE).to(dtype)
    wg, wu = (torch.randn(24, 32, device=DEVICE).to(dtype) * 0.2 for _ in range(2))
    actf = {"silu": F.silu, "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "relu": F.relu,
            "sigmoid": torch.sigmoid}[act]

    def fn(x, wg, wu):
        if fused:
            gu = F.linear(x, torch.cat([wg, wu], 0))
            g, u = gu.chunk(2, dim=chunk_dim)
        else:
            g, u = F.linear(x, wg), F.linear(x, wu)
        a = actf(g)
        if combine == "add":
            return a + u
        return a * u if order == "act_first" else u * a

    desc = dict(family="gated", dtype=dtype, act=act, order=order, fused=fused, chunk_dim=chunk_dim,
                combine=combine)
    return fn, (x, wg, wu), dtype, desc


def attention_case(rng: random.Random):
    dtype = rng.choice([torch.float32, torch.bfloat16])
    s_q, s_kv = rng.choice([(6, 6), (6, 6), (3, 6), (1, 6)])
    spelling = rng.choice(["sdpa", "eager"])
    mask_kind = rng.choice(["none", "causal", "window", "shifted", "bool_added", "float", "causal_flag"])
    window = rng.choice([2, 3])
    offset = rng.choice([-1, 0, 1])
    scale = rng.choice([None, 0.25, 0.5])
    softmax_dim = near(rng, -1, -2)
    gqa = rng.choice([False, True])
    q = torch.randn(2, 4, s_q, 8, device=DEVICE).to(dtype)
    hk = 2 if gqa else 4
    k, v = (torch.randn(2, hk, s_kv, 8, device=DEVICE).to(dtype) for _ in range(2))

    def mask_of(q, k):
        i = torch.arange(q.shape[2], device=q.device)[:, None] + (k.shape[2] - q.shape[2])
        j = torch.arange(k.shape[2], device=q.device)[None, :]
        if mask_kind == "causal":
            return j <= i
        if mask_kind == "window":
            return (j <= i) & (j > i - window)
        if mask_kind == "shifted":
            return j <= i + offset
        if mask_kind == "bool_added":
            return (j <= i)
        if mask_kind == "float":
            return torch.zeros(q.shape[2], k.shape[2], device=q.device).masked_fill(j > i, float("-inf"))
        return None

    def fn(q, k, v):
        m = mask_of(q, k)
        kk, vv = (k.repeat_interleave(4 // hk, 1), v.repeat_interleave(4 // hk, 1))
        if spelling == "sdpa":
            if mask_kind == "causal_flag":
                return F.scaled_dot_product_attention(q, kk, vv, is_causal=True, scale=scale)
            return F.scaled_dot_product_attention(q, kk, vv, attn_mask=m, scale=scale)
        w = q @ kk.transpose(-1, -2) * (scale if scale is not None else q.shape[-1] ** -0.5)
        if m is not None:
            w = w + m if m.dtype != torch.bool or mask_kind == "bool_added" else w.masked_fill(~m, float("-inf"))
        p = F.softmax(w, dim=softmax_dim, dtype=torch.float32).to(q.dtype)
        return p @ vv

    desc = dict(family="attention", dtype=dtype, s=(s_q, s_kv), spelling=spelling, mask=mask_kind, window=window,
                offset=offset, scale=scale, softmax_dim=softmax_dim, gqa=gqa,
                eager_rounds_more=spelling == "eager" and dtype == torch.bfloat16)
    return fn, (q, k, v), dtype, desc


CASES = [norm_case, rope_case, gated_case, attention_case]


def _without_cudnn_attention():
    """torch's cuDNN attention, SDPA's first choice on sm_90 with a recent cuDNN (torch 2.11 on the H200), reads a
    float32 `attn_mask` as if it had the query's dtype (pytorch/pytorch PR 191612, after torch 2.11): eager's own
    numbers are wrong for a bf16 query with a float32 mask. Eager and the compiled function (whose unfused SDPA
    calls, and the backend choice made while tracing, meet the same bug) both run without it. On the H200 (torch
    2.11) the memory-efficient kernel then refuses that mask loudly ("invalid dtype for bias"), so eager raises and
    such a case is one eager rejects, not compared there (on the CPU it is compared); every other case compares
    with the flash / memory-efficient / math kernel's answer."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def _run(fn, inputs, dtype, dynamic, against_fp64=False):
    with _without_cudnn_attention():
        return _run_compared(fn, inputs, dtype, dynamic, against_fp64)


def _relative_error(x, exact):
    x, exact = x.double().nan_to_num(0.0), exact.double().nan_to_num(0.0)
    return ((x - exact).norm() / exact.norm().clamp_min(1e-30)).item()


def _run_compared(fn, inputs, dtype, dynamic, against_fp64=False):
    torch._dynamo.reset()
    mojo_compile.reset_report()
    try:
        expected = fn(*inputs)
    except RuntimeError:  # a perturbation eager itself rejects (shapes that do not broadcast): nothing to compare
        return None
    got = torch.compile(fn, backend="mojo", dynamic=dynamic,
                        options={"inner_compiler": "eager", "target": "torch"})(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = got if isinstance(got, tuple) else (got,)
    exact = fn(*(x.double() for x in inputs)) if against_fp64 else expected
    exact = exact if isinstance(exact, tuple) else (exact,)
    for g, e, x in zip(got, expected, exact):
        assert g.dtype == e.dtype and g.shape == e.shape
        assert torch.equal(torch.isnan(g), torch.isnan(e))
        if against_fp64:
            assert _relative_error(g, x) <= 1.5 * _relative_error(e, x) + 1e-6
        else:
            torch.testing.assert_close(g.nan_to_num(0.0), e.nan_to_num(0.0), **TOL[dtype])
    return mojo_compile.last_report().counts()


def test_fuzz_spellings_fused_means_equal():
    rng = random.Random(SEED)
    deadline = time.monotonic() + SECONDS
    ran, fused = 0, 0
    while time.monotonic() < deadline:
        make = rng.choice(CASES)
        fn, inputs, dtype, desc = make(rng)
        dynamic = rng.random() < 0.2
        try:
            counts = _run(fn, inputs, dtype, dynamic, desc.get("eager_rounds_more", False))
        except Exception as e:
            raise AssertionError(f"fuzz case {ran} (seed {SEED}, dynamic={dynamic}): {desc}") from e
        ran += counts is not None
        fused += bool(counts)
    assert ran > 0
    print(f"fuzz: {ran} cases, {fused} with a fused site")


@pytest.mark.parametrize("make", CASES, ids=[c.__name__ for c in CASES])
def test_fuzz_generators_reach_their_fusion(make):
    """The unperturbed draws must fuse somewhere, or the fuzzer tests nothing."""
    rng = random.Random(1)
    for _ in range(60):
        fn, inputs, dtype, desc = make(rng)
        if _run(fn, inputs, dtype, False):
            return
    pytest.fail(f"{make.__name__}: no draw fused in 60")
