"""Findings of the dynamic-shapes / recompilation review: one failing test per bug (each passes on a fixed tree).

Run (from the repository root):
    TRITON_INTERPRET=1 MOJO_CACHE_DIR=/tmp/review_dynamic_cache PYTHONPATH=tests:. \
        timeout 600 .venv/bin/python -m pytest -q scratch/review_dynamic/test_findings.py
"""
import os
import subprocess
import sys
import textwrap

import conftest  # noqa: F401  (before mojo_compile: sets TRITON_INTERPRET on a CPU machine)
import pytest
import torch
import torch.nn.functional as F

import mojo_compile
from conftest import DEVICE, TARGETS, mojo_options

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
B, H, D = 2, 2, 8


def compiled(fn, target):
    return torch.compile(fn, backend="mojo", options=mojo_options(target))


# ------------------------------------------------------------------------------------------------------------ bug 1
@pytest.mark.skipif(DEVICE != "cpu", reason="the CPU flash kernel path of the torch target")
@pytest.mark.parametrize("sq,skv,causal", [(0, 0, True), (0, 0, False), (1, 0, False), (3, 0, False), (0, 3, False)])
def test_sdpa_with_an_empty_sequence_does_not_kill_the_process(sq, skv, causal):
    """Auto-dynamic seq 7, 9, then 0 (0 is specialised: a static graph) or any static empty q / kv: the torch target
    calls aten._scaled_dot_product_flash_attention_for_cpu, which raises SIGFPE on an empty sequence. Eager SDPA
    returns the empty output (or zeros for an empty kv). Run in a child: the crash kills the interpreter."""
    code = textwrap.dedent(f"""
        import sys; sys.path[:0] = ["tests", "."]
        import conftest, torch, torch.nn.functional as F, mojo_compile
        def f(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal={causal})
        cf = torch.compile(f, backend="mojo", options={{"target": "torch", "inner_compiler": "eager"}})
        for sq, skv in ((7, 7), (9, 9), ({sq}, {skv})):
            q = torch.randn(2, 2, sq, 8)
            k, v = torch.randn(2, 2, skv, 8), torch.randn(2, 2, skv, 8)
            torch.testing.assert_close(cf(q, k, v), f(q, k, v))
        print("OK")
    """)
    env = dict(os.environ, TRITON_INTERPRET="1", MOJO_CACHE_DIR=os.environ.get("MOJO_CACHE_DIR", "/tmp/review_dynamic_cache"))
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=500)
    assert res.returncode == 0 and "OK" in res.stdout, (res.returncode, res.stderr[-2000:])


# ------------------------------------------------------------------------------------------------------------ bug 2
def arange_mask_attention(q, k, v):
    s = q.shape[2]
    i = torch.arange(s, device=q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=(i[None, :] <= i[:, None])[None, None])


@pytest.mark.parametrize("target", TARGETS)
def test_explicit_mask_on_an_empty_sequence_compiles(target):
    """Seq 7 then 0 (0 is specialised, so the second call compiles a static graph): the mask prover's `classify`
    reshapes the evaluated [1, 1, 0, 0] mask with reshape(-1, 0, 0), which torch refuses -> BackendCompilerFailed.
    Eager returns the empty output."""
    fn = compiled(arange_mask_attention, target)
    for s in (7, 0):
        q, k, v = (torch.randn(B, H, s, D, device=DEVICE) for _ in range(3))
        torch.testing.assert_close(fn(q, k, v), arange_mask_attention(q, k, v))


# ------------------------------------------------------------------------------------------------------------ bug 3
def hf_causal_and_padding(q, k, v, am):
    s = q.shape[2]
    cache_position = torch.arange(s, device=q.device)
    kv_idx = torch.arange(k.shape[2], device=q.device)
    mask = (kv_idx[None, None, None, :] <= cache_position[None, None, :, None]) & am[:, None, None, :].bool()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.skipif("ttx" not in TARGETS, reason="needs the ttx target")
def test_ttx_key_padding_backward_on_an_empty_sequence():
    """HF's causal & padding mask (proven: causal + key padding [B, 1, 1, S]) at seq 0 (auto-dynamic 7, 9, then 0):
    the forward runs, the ttx backward's _extras reshapes the [B, 1, 1, 0] key mask with reshape(-1, 0) -> RuntimeError.
    Eager's backward gives empty gradients."""
    fn = compiled(hf_causal_and_padding, "ttx")
    for s in (7, 9, 0):
        q, k, v = (torch.randn(B, H, s, D, device=DEVICE, requires_grad=True) for _ in range(3))
        am = torch.ones(B, s, dtype=torch.long, device=DEVICE)
        out = fn(q, k, v, am)
        assert mojo_compile.last_report().counts()["mojo.attention"] >= 1
        grads = torch.autograd.grad(out.sum(), (q, k, v))
        expected = torch.autograd.grad(hf_causal_and_padding(q, k, v, am).sum(), (q, k, v))
        for g, e in zip(grads, expected):
            torch.testing.assert_close(g, e)


# ------------------------------------------------------------------------------------------------------------ bug 4
def rms(x, w):
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def swiglu(g, u):
    return F.silu(g) * u


def chunked(gu):
    g, u = gu.chunk(2, dim=-1)
    return F.silu(g) * u


ZERO_WIDTH = {
    "rms_norm": (rms, lambda h: [torch.randn(2, 7, h), torch.randn(h) + 1]),
    "layer_norm": (layer_norm, lambda h: [torch.randn(2, 7, h), torch.randn(h) + 1, torch.randn(h)]),
    "gated_act": (swiglu, lambda h: [torch.randn(2, 7, h), torch.randn(2, 7, h)]),
    "gated_act_fused": (chunked, lambda h: [torch.randn(2, 7, 2 * h)]),
}


ZERO_WIDTH_CASES = [("rms_norm", "torch")] + ([(n, "ttx") for n in ZERO_WIDTH] if "ttx" in TARGETS else [])


@pytest.mark.parametrize("name,target", ZERO_WIDTH_CASES)
def test_zero_width_last_dim(name, target):
    """Hidden 16 then 0 (0 specialised: a static graph): the row helpers flatten with reshape(-1, 0), which torch
    refuses for 0 elements. ttx: the forward raises (kernels/common.py contiguous_rows, kernels/gated_act.py _rows);
    torch: the rms_norm backward raises (lowering/reference.py grad_w). Eager gives empty outputs and gradients."""
    fn, make = ZERO_WIDTH[name]
    cfn = compiled(fn, target)
    for h in (16, 0):
        args = [t.to(DEVICE).requires_grad_() for t in make(h)]
        out = cfn(*args)
        assert mojo_compile.last_report().counts()["mojo." + name] >= 1
        grads = torch.autograd.grad(out.sum(), args, allow_unused=True)
        expected_out = fn(*args)
        expected = torch.autograd.grad(expected_out.sum(), args, allow_unused=True)
        torch.testing.assert_close(out, expected_out)
        for g, e in zip(grads, expected):
            if e is not None:
                torch.testing.assert_close(g, e)


# ------------------------------------------------------------------------------------------------------------ bug 5
def additive_causal_and_left_padding(q, k, v, am):
    b, _, s, _ = q.shape
    i = torch.arange(s, device=q.device)
    causal = (i[None, :] <= i[:, None])[None, None]
    m = torch.zeros(b, 1, s, s, dtype=q.dtype, device=q.device).masked_fill(~causal, torch.finfo(q.dtype).min)
    m = m.masked_fill(am[:, None, None, :] == 0, torch.finfo(q.dtype).min)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m)


@pytest.mark.parametrize("dynamic", [False, True])
def test_additive_min_mask_fully_masked_rows_gradient_is_eagers_on_the_torch_target(dynamic):
    """Old-HF style additive finfo.min mask, causal + left padding: row 1's first queries see no key (every score
    finfo.min). Outputs agree; the torch target's gradients of q, k, v differ from eager's (by the factor n on those
    rows: eager's backward -- and the ttx kernel -- take p = exp(s - lse) with an lse that lost log n; the reference
    recomputes p by softmax). ttx gives eager's gradients."""
    s = 6
    q, k, v = (torch.randn(B, H, s, D, device=DEVICE, requires_grad=True) for _ in range(3))
    am = torch.ones(B, s, dtype=torch.long, device=DEVICE)
    am[1, :3] = 0
    fn = torch.compile(additive_causal_and_left_padding, backend="mojo", dynamic=dynamic, options=mojo_options("torch"))
    out = fn(q, k, v, am)
    assert mojo_compile.last_report().counts()["mojo.attention"] == 1
    expected_out = additive_causal_and_left_padding(q, k, v, am)
    torch.testing.assert_close(out, expected_out)
    g = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), g)
    expected = torch.autograd.grad(expected_out, (q, k, v), g)
    for got, exp in zip(grads, expected):
        torch.testing.assert_close(got, exp, rtol=1e-4, atol=1e-5)
