"""RoPE and attention near-misses found by an adversarial review: HF's transposed q, k (and SDPA's output) viewed
in eager's strided layout after the fused op (the ops' results are contiguous: backend.relayout_views turns such a
view into a reshape), fp64 q / k / v (the ops compute in fp32: refused), and one of q's and k's sides wanting a
gradient (one op's outputs would all require grad: refused). Each gives eager's numbers, dtypes, requires_grad and
gradients. Torch target and ttx (the interpreter on the CPU), eager inner compiler; each case also holds with
backend="aot_eager", so a failure is the rewrite's.
"""
import pytest
import torch
import torch.nn.functional as F

import mojo_compile
from conftest import TARGETS, mojo_options

B, S, H, HKV, D = 2, 5, 4, 2, 16


def compiled(fn, target):
    return torch.compile(fn, backend="mojo", dynamic=False, options=mojo_options(target))


def counts():
    return mojo_compile.last_report().counts()


def unfused_and_exact(op, got, want):
    """fp64: refused (the op computes in fp32), eager's fp64 values (1e-12: far below fp32's ~1e-7 error)."""
    assert op not in counts(), counts()
    for g, w in zip(got, want):
        assert g.dtype == torch.float64
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):  # HF's
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def tables(dtype=torch.float32):
    inv = 1.0 / (10000 ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    emb = torch.arange(S, dtype=torch.float64)[:, None] * inv[None]
    emb = torch.cat([emb, emb], -1)
    return (emb.cos().to(dtype)[None].expand(B, S, D).contiguous(),
            emb.sin().to(dtype)[None].expand(B, S, D).contiguous())


def rms(x, w, eps=1e-6):  # HF's Qwen3RMSNorm
    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(dtype)


# ------------------------------------------------------------------------------------- 1. rope: result layout
@pytest.mark.parametrize("target", TARGETS)
def test_rope_result_viewed_as_eagers_transposed_layout(target):
    """HF layout: q, k = proj(x).view(B, S, H, D).transpose(1, 2). Eager's `q * cos + rotate_half(q) * sin`
    follows q's (transposed) layout, so `.transpose(1, 2).view(B, S, H * D)` works in eager (and aot_eager);
    mojo::rope returns contiguous tensors and the view raises."""
    def fn(xq, xk, cos, sin):
        q, k = xq.view(B, S, H, D).transpose(1, 2), xk.view(B, S, HKV, D).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        return q.transpose(1, 2).view(B, S, H * D), k.transpose(1, 2).view(B, S, HKV * D)

    xq, xk = torch.randn(B, S, H * D), torch.randn(B, S, HKV * D)
    cos, sin = tables()
    ref = fn(xq, xk, cos, sin)
    out = compiled(fn, target)(xq, xk, cos, sin)
    assert counts()["mojo.rope"] == 1
    for o, r in zip(out, ref):
        torch.testing.assert_close(o, r, rtol=0, atol=0 if target == "torch" else 1e-5)


# ------------------------------------------------------------------------------ 2. rope: fp64 backward in fp32
@pytest.mark.parametrize("cos_dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("target", TARGETS)
def test_rope_fp64_gradient_is_computed_in_fp64(target, cos_dtype):
    """fp64 q and k: eager's gradient is fp64-exact; mojo::rope_backward's torch reference (and ttx, which falls
    back to it) computes it in fp32 (`.float()`) and casts back: errors ~3e-7 against 0."""
    def fn(q, k, cos, sin):
        return apply_rotary_pos_emb(q, k, cos, sin)

    cos, sin = tables(cos_dtype)
    q0, k0 = torch.randn(B, H, S, D, dtype=torch.float64), torch.randn(B, HKV, S, D, dtype=torch.float64)
    gq, gk = torch.randn(B, H, S, D, dtype=torch.float64), torch.randn(B, HKV, S, D, dtype=torch.float64)

    def grads(f):
        q, k = q0.clone().requires_grad_(), k0.clone().requires_grad_()
        oq, ok = f(q, k, cos, sin)
        ((oq * gq).sum() + (ok * gk).sum()).backward()
        return q.grad, k.grad

    unfused_and_exact("mojo.rope", grads(compiled(fn, target)), grads(fn))


# --------------------------------------------------------------- 3. rope / qk_norm_rope: requires_grad of outputs
@pytest.mark.parametrize("target", TARGETS)
def test_rope_output_requires_grad_only_where_eagers_does(target):
    """q needs a gradient, k does not (a frozen / no-grad k): eager's rotated k requires none; the op's second
    output is marked requiring grad (a custom op's outputs all follow any input), so e.g. `k_rot.numpy()` raises."""
    def fn(q, k, cos, sin):
        return apply_rotary_pos_emb(q, k, cos, sin)

    cos, sin = tables()
    q, k = torch.randn(B, H, S, D, requires_grad=True), torch.randn(B, HKV, S, D)
    ref = fn(q, k, cos, sin)
    out = compiled(fn, target)(q, k, cos, sin)
    assert [t.requires_grad for t in out] == [t.requires_grad for t in ref] == [True, False]


@pytest.mark.parametrize("target", TARGETS)
def test_qk_norm_rope_output_requires_grad_only_where_eagers_does(target):
    """Qwen3 qk-norm + RoPE with a trainable q_norm weight and a frozen k_norm weight (k from no-grad activations):
    eager's k requires no grad, mojo::qk_norm_rope's k output does."""
    def fn(xq, xk, qw, kw, cos, sin):
        q = rms(xq.view(B, S, H, D), qw).transpose(1, 2)
        k = rms(xk.view(B, S, HKV, D), kw).transpose(1, 2)
        return apply_rotary_pos_emb(q, k, cos, sin)

    cos, sin = tables()
    args = (torch.randn(B, S, H * D), torch.randn(B, S, HKV * D), torch.randn(D, requires_grad=True), torch.randn(D),
            cos, sin)
    ref = fn(*args)
    out = compiled(fn, target)(*args)
    assert [t.requires_grad for t in out] == [t.requires_grad for t in ref] == [True, False]


# ----------------------------------------------------------------------------------- 4. attention: result layout
@pytest.mark.parametrize("spelling", ["causal", "mask", "gqa"])
@pytest.mark.parametrize("target", TARGETS)
def test_sdpa_result_viewed_as_eagers_transposed_layout(target, spelling):
    """q, k, v as HF lays them out (transposes of [B, S, H, D]): eager's SDPA output follows q's layout
    ([B, S, H, D] in memory), so `out.transpose(1, 2).view(B, S, H * D)` works in eager and aot_eager; the op's
    output is contiguous [B, H, S, D] and the view raises."""
    hkv = HKV if spelling == "gqa" else H
    mask = torch.randn(B, 1, S, S)

    def fn(xq, xk, xv):
        q = xq.view(B, S, H, D).transpose(1, 2)
        k, v = (x.view(B, S, hkv, D).transpose(1, 2) for x in (xk, xv))
        if spelling == "causal":
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif spelling == "mask":
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            o = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        return o.transpose(1, 2).view(B, S, H * D)

    args = (torch.randn(B, S, H * D), torch.randn(B, S, hkv * D), torch.randn(B, S, hkv * D))
    ref = fn(*args)
    out = compiled(fn, target)(*args)
    assert counts()["mojo.attention"] == 1
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)  # (fp32: the op's summation order)


# ------------------------------------------------------------------------------------ 5. attention: fp64 in fp32
@pytest.mark.parametrize("spelling", ["mask", "causal", "gqa"])
@pytest.mark.parametrize("target", TARGETS)
def test_fp64_attention_is_computed_in_fp64(target, spelling):
    """fp64 q, k, v: eager's SDPA computes in fp64 (error 0 against itself); mojo::attention's torch reference
    (scores, softmax, p @ v: `.float()`) and its backward compute in fp32: ~4e-7 in the output (with a mask) and in
    every gradient (all spellings). ttx falls back to the same reference for fp64."""
    hkv = HKV if spelling == "gqa" else H
    q0 = torch.randn(B, H, S, D, dtype=torch.float64)
    k0, v0 = torch.randn(B, hkv, S, D, dtype=torch.float64), torch.randn(B, hkv, S, D, dtype=torch.float64)
    mask = torch.randn(B, 1, S, S, dtype=torch.float64)
    g = torch.randn(B, H, S, D, dtype=torch.float64)

    def fn(q, k, v):
        if spelling == "mask":
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        if spelling == "causal":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True, scale=0.2)

    def run(f):
        q, k, v = (t.clone().requires_grad_() for t in (q0, k0, v0))
        out = f(q, k, v)
        (out * g).sum().backward()
        return out, q.grad, k.grad, v.grad

    unfused_and_exact("mojo.attention", run(compiled(fn, target)), run(fn))
