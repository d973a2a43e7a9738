"""The mask prover on near-misses: masks that look causal / windowed / padded but are not, or that are and must keep
every part. Each gives eager's numbers, whatever structure is (or is not) proven. Static shapes (the mask subgraph
run once) and dynamic=True (the mask as a formula of its indices: patterns/mask_algebra.py)."""
import pytest
import torch
import torch.nn.functional as F

import mojo_compile
from conftest import DEVICE, WITH_INDUCTOR, mojo_options

TARGETS = WITH_INDUCTOR  # every prover case also through Inductor
B, H, S, D = 2, 2, 7, 8


def compiled(fn, target, dynamic):
    return torch.compile(fn, backend="mojo", dynamic=dynamic, options=mojo_options(target))


def qkv():
    return tuple(torch.randn(B, H, S, D, device=DEVICE) for _ in range(3))


def check(fn, target, dynamic, *extra):
    q, k, v = qkv()
    got = compiled(fn, target, dynamic)(q, k, v, *extra)
    torch.testing.assert_close(got, fn(q, k, v, *extra), rtol=1e-5, atol=1e-5)  # fp32 in both, another order
    return mojo_compile.last_report()


def causal_and_bool_padding(q, k, v, am):
    s = q.shape[2]
    i = torch.arange(s, device=q.device)[:, None]
    j = torch.arange(s, device=q.device)[None, :]
    mask = (j <= i)[None, None] & (am[:, None, None, :] != 0)  # am is bool: `!= 0` is am itself
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dynamic", [False, True])
def test_causal_and_bool_attention_mask_keeps_the_padding(dynamic, target):
    am = torch.ones(B, S, dtype=torch.bool, device=DEVICE)
    am[1, :3] = False  # left padding in row 1
    report = check(causal_and_bool_padding, target, dynamic, am)
    assert report.counts() == {"mojo.attention": 1}


def window_with_sink(q, k, v):
    s = q.shape[2]
    i = torch.arange(s, device=q.device)[:, None]
    j = torch.arange(s, device=q.device)[None, :]
    mask = (j <= i) & (j > i - 3)
    mask[:, 0] = True  # a sink token every query sees, written after the window was built
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("target", TARGETS)
def test_mask_written_in_place_after_it_was_built(target):
    report = check(window_with_sink, target, False)
    for site in report.sites:  # fused with the tensor, or not at all: never "causal, window 3"
        assert "window" not in site.detail, site


def broadcast_arange_of_one(q, k, v):
    s = q.shape[2]
    i = torch.arange(s, device=q.device)[:, None] + torch.arange(1, device=q.device)  # + 0, broadcast
    j = torch.arange(s, device=q.device)[None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=(j <= i)[None, None])  # 4-D: the prover's form


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dynamic", [False, True])
def test_size_one_dim_reads_element_zero(dynamic, target):
    """`arange(1)` broadcast against a row index is 0 at every row, not the row's index: the mask is causal (and
    proven so, on the symbolic path too)."""
    report = check(broadcast_arange_of_one, target, dynamic)
    assert [s.detail for s in report.sites] == ["mask: causal (proven from the mask subgraph)"]


def shifted_with_alpha(q, k, v):
    s = q.shape[2]
    i = torch.arange(s, device=q.device)[:, None]
    j = torch.arange(s, device=q.device)[None, :]
    mask = j <= torch.add(i, i, alpha=-1) + i  # i - i + i: causal
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[None, None])  # 4-D: the prover's form


def alpha_two(q, k, v):
    s = q.shape[2]
    i = torch.arange(s, device=q.device)[:, None]
    j = torch.arange(s, device=q.device)[None, :]
    mask = j <= torch.add(i, i, alpha=2) - i  # i + 2i - i = 2i: not causal
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[None, None])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("fn", [shifted_with_alpha, alpha_two], ids=["alpha=-1", "alpha=2"])
def test_add_with_alpha_in_a_mask(fn, dynamic, target):
    """The prover gives up on an alpha (the static path runs the subgraph, which honours it); the numbers are
    eager's either way."""
    report = check(fn, target, dynamic)
    if fn is alpha_two:
        assert [s.detail for s in report.sites] == ["mask: tensor"]
