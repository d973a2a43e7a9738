"""Review s25 (the training loss path and the backward in pieces): each test is one confirmed finding and fails on
the current code, asserting the correct behaviour. Run:
    cd /work/main && MOJO_CACHE_DIR=/tmp/rev25l_cache PYTHONPATH=tests:. timeout 600 .venv/bin/python -m pytest -q \
        -p no:cacheprovider -W ignore scratch/review_s25_loss/test_findings.py
"""
import pytest
import torch
import torch.nn.functional as F

import mojo_compile
from conftest import DEVICE
from test_cross_entropy import check_as_accurate

V, K, H = 8, 2, 4  # classes per head, heads side by side in the logits' last dim, hidden size
BF16, FP64 = torch.bfloat16, torch.float64


def f32(x):
    """`.float()` as the model spells it; an fp64 reference keeps its precision."""
    return x if x.dtype == FP64 else x.float()


def heads_loss(x, t):
    """k heads' logits side by side ([B, T, k * V], multi-token / Medusa heads), one label per head and position."""
    return F.cross_entropy(f32(x).view(-1, V), t)


def heads_loss_fp32(x, t):
    return F.cross_entropy(x.view(-1, V), t)


def heads_lm_head_loss(h, w, t):
    """The same with the heads' projection in the graph: F.linear(h, w) is [B, T, k * V]."""
    return F.cross_entropy(f32(F.linear(h, w)).view(-1, V), t)


def _other_view_case(name):
    torch.manual_seed(0)
    t = torch.randint(0, V, (2 * 5 * K,))
    if name == "materialised_bf16":
        return heads_loss, [(torch.randn(2, 5, K * V) * 3).to(BF16), t], (0,)
    if name == "materialised_fp32":
        return heads_loss_fp32, [torch.randn(2, 5, K * V) * 3, t], (0,)
    return heads_lm_head_loss, [torch.randn(2, 5, H).to(BF16), torch.randn(K * V, H).to(BF16), t], (0, 1)


def _loss_and_grads(fn, args, wrt):
    args = [a.detach().to(DEVICE).requires_grad_() if i in wrt else a.to(DEVICE) for i, a in enumerate(args)]
    loss = fn(*args)
    loss.backward()
    return [loss.detach(), *[args[i].grad for i in wrt]]


@pytest.mark.parametrize("case", ["materialised_bf16", "materialised_fp32", "lm_head"])
def test_loss_on_another_view_of_the_logits_compiles_under_dynamic_shapes(case):
    """Finding 1 (crash): `F.cross_entropy(x.float().view(-1, V), t)` with x [B, T, k * V] (another view of the
    logits than [N, V]; static shapes: the `.rows` form fuses it) compiled with dynamic=True. The flattening pattern's
    re-trace views the logits as [-1, x.shape[-1]] with a symbolic last dim; rows_agree cannot prove the labels'
    length differs from those rows, so it lets the re-trace reach F.cross_entropy, whose batch-size check raises a
    ValueError that Inductor's matcher does not catch: the compile fails where eager runs."""
    fn, args, wrt = _other_view_case(case)
    compiled = torch.compile(fn, backend="mojo", options={"inner_compiler": "eager"}, dynamic=True)
    got = _loss_and_grads(compiled, args, wrt)
    eager = _loss_and_grads(fn, args, wrt)
    exact = _loss_and_grads(fn, [a.double() if a.is_floating_point() else a for a in args], wrt)
    for i, (mine, theirs, truth) in enumerate(zip(got, eager, exact)):
        assert mine.dtype == theirs.dtype and mine.shape == theirs.shape, i
        check_as_accurate(mine, theirs, truth, torch.float32 if i == 0 else mine.dtype, f"output {i}")


def shape_spelled_lm_head_loss(h, w, t):
    z = F.linear(h, w).float()
    return F.cross_entropy(z.view(-1, z.shape[-1]), t)


def test_lm_head_and_loss_fuse_when_the_view_reads_the_vocab_off_the_logits_under_dynamic_shapes():
    """Finding 2 (missed fusion): under dynamic=True, `z.view(-1, z.shape[-1])` (the vocabulary read off the
    logits, not a literal) puts a SymInt graph input in the view's sizes, which the patterns (traced with a literal
    V) do not match: neither the LM head fusion nor the flattening loss form applies, and the `.rows` form takes the
    fp32 [N, V] view -- the fp32 copy of the logits and its fp32 gradient, which the fusion exists to remove, are
    back. With the literal V, or without dynamic=True, the head and the loss fuse."""
    torch.manual_seed(0)
    vocab, hidden = 37, 16
    h = torch.randn(2, 5, hidden, dtype=BF16)
    w = torch.randn(vocab, hidden, dtype=BF16)
    t = torch.randint(0, vocab, (10,))
    mojo_compile.reset_report()
    compiled = torch.compile(shape_spelled_lm_head_loss, backend="mojo", options={"inner_compiler": "eager"},
                             dynamic=True)
    got = _loss_and_grads(compiled, [h, w, t], (0, 1))
    assert [s.pattern for s in mojo_compile.last_report().sites] == ["linear_cross_entropy.linear.mean"]
    eager = _loss_and_grads(shape_spelled_lm_head_loss, [h, w, t], (0, 1))
    exact = _loss_and_grads(shape_spelled_lm_head_loss, [h.double(), w.double(), t], (0, 1))
    for i, (mine, theirs, truth) in enumerate(zip(got, eager, exact)):
        check_as_accurate(mine, theirs, truth, torch.float32 if i == 0 else mine.dtype, f"output {i}")
