"""Aliasing and in-place spellings against the alias checks of every family: graph inputs that are views of one
another (`f(x=big[:2], big)` writing big), which no view chain links -- each placeholder is its own root -- so the
checks also compare the traced values' storages (canonicalize.storage_of): the canonical rules that drop `x * 1.0`,
the norms' `_written_later`, the mask prover's `Writes` (mask_algebra) and share_repeated_kv. Each case gives
eager's numbers and leaves the inputs as eager does. Torch target, ttx (the interpreter on the CPU) and a few
through Inductor."""
import pytest
import torch
import torch.nn.functional as F

import mojo_compile
from conftest import DEVICE, TARGETS, mojo_options

B, H, D = 2, 2, 8


def compiled(fn, target, dynamic=False):
    return torch.compile(fn, backend="mojo", dynamic=dynamic, options=mojo_options(target))


def as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def run_both(fn, build, target, dynamic=False):
    """fn eagerly and compiled, each on its own build of the same inputs: (want, got, eager args, compiled args)."""
    eager_args, compiled_args = build(), build()
    want = fn(*eager_args)
    got = compiled(fn, target, dynamic)(*compiled_args)
    return want, got, eager_args, compiled_args


def assert_same(got, want, got_args=(), want_args=()):
    """Outputs as eager's (fp32 in both, another order) and every input as eager left it."""
    for g, w in zip(as_tuple(got), as_tuple(want)):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5, equal_nan=True)
    for g, w in zip(got_args, want_args):
        if isinstance(g, torch.Tensor):
            assert torch.equal(g, w)


def randn(*shape):
    return torch.randn(*shape, device=DEVICE)


def counts():
    return mojo_compile.last_report().counts()


# ------------------------------------------------------------------------------- canonicalisation: x * 1.0
IDENTITIES = {"x * 1.0": lambda x: x * 1.0, "x + 0": lambda x: x + 0, "x / 1": lambda x: x / 1}


def identity_then_write(spelling):
    def fn(x, big):
        y = IDENTITIES[spelling](x)  # a fresh tensor: dropping the op would make y an alias of x, of big's storage
        big.mul_(2)
        return y
    return fn


@pytest.mark.parametrize("target", ["torch", "torch+inductor"])
@pytest.mark.parametrize("spelling", list(IDENTITIES))
def test_identity_arith_of_an_input_that_aliases_a_written_input(spelling, target):
    """Found by this review: `x * 1.0` was dropped (x is written by no op of the graph) though x is a view of big,
    which the graph doubles afterwards: the compiled y came back doubled (eager and Inductor inner compiler)."""
    if target == "torch+inductor" and spelling != "x * 1.0":
        pytest.skip("one spelling through Inductor")
    big0 = randn(4, 8)

    def build():
        big = big0.clone()
        return [big[:2], big]
    want, got, eager_args, compiled_args = run_both(identity_then_write(spelling), build, target)
    assert torch.equal(got, want)
    assert torch.equal(compiled_args[1], eager_args[1])


# --------------------------------------------------------------------------- norms: saved input written later
def llama_rms_norm(x, w):
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)


NORMS = {
    "rms_norm.llama": lambda x, r, w: llama_rms_norm(x, w),
    "rms_norm.F_rms_norm": lambda x, r, w: F.rms_norm(x, (x.shape[-1],), w, 1e-6),
    "add_rms_norm.llama": lambda x, r, w: llama_rms_norm(r + x, w),
}


def norm_then_write(name):
    def fn(x, r, big, w):
        y = NORMS[name](x, r, w)
        big.mul_(2)
        return y
    return fn


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(NORMS))
def test_norm_of_an_input_that_aliases_one_written_later(name, target):
    """Found by this review: x (no gradient) is a view of big, written after the norm; the weight wants a gradient.
    Eager's ops saved only the normalised product for w's gradient, so its backward runs; the Mojo op saved x, and
    its backward raised 'modified by an inplace operation' (the site must stay eager's). The residual form (x read
    by the add only, the op saving the fresh sum) held: a pin."""
    big0, r0, w0 = randn(4, 8), randn(2, 8), randn(8)

    def build():
        big = big0.clone()
        return [big[:2], r0.clone(), big, w0.clone().requires_grad_()]
    want, got, eager_args, compiled_args = run_both(norm_then_write(name), build, target)
    if name != "add_rms_norm.llama":
        assert "mojo.rms_norm" not in counts()
    assert_same(got, want, compiled_args[1:3], eager_args[1:3])
    try:
        want.square().sum().backward()
    except RuntimeError as e:
        # CUDA's fused aten F.rms_norm saves x itself, so there eager's backward raises too: the compiled code must
        # raise as eager does, not run on the overwritten x
        assert "inplace operation" in str(e)
        with pytest.raises(RuntimeError, match="inplace operation"):
            got.square().sum().backward()
        return
    got.square().sum().backward()
    torch.testing.assert_close(compiled_args[3].grad, eager_args[3].grad, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------- the mask prover
def positions_bumped_through_an_alias(q, k, v, positions, base):
    base.add_(3)  # positions is a view of base: the mask reads the new positions
    mask = torch.arange(k.shape[2], device=q.device)[None, :] <= positions[:, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("target", [*TARGETS, "torch+inductor"])
@pytest.mark.parametrize("dynamic", [False, True])
def test_positions_written_through_an_aliasing_input_before_the_mask(dynamic, target):
    """Found by this review: the positions were proven a runtime input read before any write (the write is to base,
    another placeholder), and copied at the start of the graph: causal at the old positions (eager and Inductor)."""
    if target == "torch+inductor" and dynamic:
        pytest.skip("static shapes through Inductor")
    q, k, v, base = randn(B, H, 5, D), randn(B, H, 11, D), randn(B, H, 11, D), torch.tensor([6, 2, 3, 4, 5, 0, 0])

    def build():
        b = base.to(DEVICE, copy=True)
        return [q, k, v, b[:5], b]
    want, got, eager_args, compiled_args = run_both(positions_bumped_through_an_alias, build, target, dynamic)
    assert_same(got, want, compiled_args, eager_args)


def padding_flipped_through_an_alias(q, k, v, am, base):
    s = q.shape[2]
    i = torch.arange(s, device=q.device)[:, None]
    j = torch.arange(s, device=q.device)[None, :]
    mask = (j <= i)[None, None] & (am[:, None, None, :] != 0)
    base.logical_not_()  # after the mask is built: attention reads the mask as it was, not am's new values
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("target", TARGETS)
def test_padding_written_through_an_aliasing_input_after_the_mask(target):
    """Found by this review: causal + key padding was proven, and the key-padding form reads am where attention
    runs -- after base (am's storage) was flipped."""
    q, k, v = randn(B, H, 5, D), randn(B, H, 5, D), randn(B, H, 5, D)
    base = torch.rand(B + 1, 5, device=DEVICE) > 0.3
    base[:, 0] = True  # every row allows a key in eager

    def build():
        b = base.clone()
        return [q, k, v, b[:B], b]
    want, got, eager_args, compiled_args = run_both(padding_flipped_through_an_alias, build, target)
    assert_same(got, want, compiled_args, eager_args)


def repeat_kv(x, n):
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, n, s, d).reshape(b, h * n, s, d)


def cache_written_through_its_alias(repeat):
    def fn(q, k_cache, v_cache, k_cache_alias, k_new):
        k = repeat_kv(k_cache, 2) if repeat else k_cache  # repeat_kv copies the cache before the write
        v = repeat_kv(v_cache, 2) if repeat else v_cache
        k_cache_alias.index_copy_(2, torch.tensor([0, 1], device=q.device), k_new)
        return F.scaled_dot_product_attention(q, k, v)
    return fn


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("repeat", [True, False], ids=["repeat_kv", "read_directly"])
def test_static_cache_passed_twice(repeat, target):
    """A StaticCache-like index_copy_ into the cache through a second input that is a view of it. Found by this
    review (repeat_kv): share_repeated_kv gave attention the cache itself, read after the write, where eager read
    repeat_kv's copy made before it. Read directly, attention reads the written cache in both."""
    heads = 2 * H if repeat else H
    q, k_cache, v_cache, k_new = randn(1, heads, 4, D), randn(1, H, 4, D), randn(1, H, 4, D), randn(1, H, 2, D)

    def build():
        kc = k_cache.clone()
        return [q, kc, v_cache.clone(), kc[:], k_new]
    want, got, eager_args, compiled_args = run_both(cache_written_through_its_alias(repeat), build, target)
    assert "mojo.attention" in counts()
    assert_same(got, want, compiled_args, eager_args)


# ---------------------------------------------------------------- rope and gated activations: pins (they held)
def rope(q, k, cos, sin):
    def rotate_half(x):
        return torch.cat((-x[..., x.shape[-1] // 2:], x[..., :x.shape[-1] // 2]), dim=-1)
    c, s = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * c + rotate_half(q) * s, k * c + rotate_half(k) * s


def rope_around_a_write(where):
    def fn(q, k, cos, sin, table):
        if where == "before":
            table.mul_(2)  # cos and sin are views of table: the rotation reads the doubled values
        q_out, k_out = rope(q, k, cos, sin)
        if where == "after":
            table.mul_(2)
        if where == "q after":
            q.mul_(2)  # q written after it was rotated: the rotation read it before
        return q_out, k_out
    return fn


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("where", ["before", "after", "q after"])
def test_rope_tables_views_of_an_input_written_around_it(where, target):
    """cos / sin are views of one table input, written in place before or after the rotation; q written after."""
    q, k, table = randn(B, 4, 5, 16), randn(B, 2, 5, 16), randn(2 * B, 5, 16)

    def build():
        t = table.clone()
        return [q.clone(), k, t[:B], t[B:], t]
    with torch.no_grad():
        want, got, eager_args, compiled_args = run_both(rope_around_a_write(where), build, target)
    assert_same(got, want, compiled_args, eager_args)


def gated_around_a_write(where):
    def fn(gate, up, big):
        if where == "before":
            big.add_(1)
        y = F.silu(gate) * up
        if where == "after":
            big.add_(1)
        return y
    return fn


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("where", ["before", "after"])
@pytest.mark.parametrize("overlap", [False, True], ids=["halves", "overlapping"])
def test_gated_act_of_views_of_one_input_written_around_it(overlap, where, target):
    """gate and up are views of one input (its two halves, or overlapping windows), which is written in place before
    or after the product."""
    big0 = randn(3, 24)

    def build():
        big = big0.clone()
        return [big[:, :8], big[:, 4:12] if overlap else big[:, 8:16], big]
    with torch.no_grad():
        want, got, eager_args, compiled_args = run_both(gated_around_a_write(where), build, target)
    assert_same(got, want, compiled_args, eager_args)
