"""The LM head fused with the loss -> `mojo::linear_cross_entropy`: `F.cross_entropy(F.linear(h, W).float()
.view(-1, V), t)` and `h @ W.T`, where the logits are nothing else's input; loss, dhidden and dweight as accurate as
eager against fp64 (bf16, fp32; V = 517, not a multiple of the vocabulary block; ignored rows; every reduction);
nothing of N x V elements saved for the backward; logits returned -> the materialised form (mojo::cross_entropy);
unmodelled sites refused or left to the materialised form."""
import pytest
import torch
import torch.nn.functional as F

import mojo_compile
from conftest import DEVICE, TARGETS
from test_cross_entropy import check_as_accurate, compile_mojo
from mojo_compile import lowering
from mojo_compile.ops import linear_cross_entropy as lce_ops

mojo = torch.ops.mojo
N_ROWS, HID, VOCAB = 12, 32, 517


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Blocks of 5 rows and 128 classes: several of each, the last ones partial (12 rows, V = 517). The Triton
    path's chunks: 5 rows of bf16 logits, 2 of fp32 (dweight summed over 3 or 6 chunks)."""
    monkeypatch.setattr(lce_ops, "LCE_BLOCKS", (5, 128))
    monkeypatch.setattr(lce_ops, "LCE_CHUNK_BYTES", 5 * VOCAB * 2)


def sites():
    return [(s.pattern, s.op) for s in mojo_compile.last_report().sites]


def head_loss(spelling, reduction, ignore_index=-100):
    def linear(h, w, t):  # h [B, S, H]: HF's flatten
        return F.cross_entropy(F.linear(h, w).float().view(-1, w.shape[0]), t, ignore_index=ignore_index,
                               reduction=reduction)

    def matmul(h, w, t):  # h [N, H]
        return F.cross_entropy((h @ w.T).float(), t, ignore_index=ignore_index, reduction=reduction)
    return linear if spelling == "linear" else matmul


def inputs(dtype, spelling, ignored=(1, 4, 5)):
    h = torch.randn(N_ROWS, HID, device=DEVICE).to(dtype)
    if spelling == "linear":
        h = h.view(3, 4, HID)
    w = (torch.randn(VOCAB, HID, device=DEVICE) / 2).to(dtype)
    t = torch.randint(0, VOCAB, (N_ROWS,), device=DEVICE)
    t[list(ignored)] = -100
    return h, w, t


def run(fn, h, w, t, grad):
    h, w = h.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    loss = fn(h, w, t)
    loss.backward(grad)
    return loss.detach(), h.grad, w.grad


def check_fused_as_accurate(fn, target, dtype, reduction, pattern, spelling="linear"):
    """fn compiled: the one fused site is `pattern`; loss, dhidden and dweight as accurate as eager against fp64
    (a random upstream gradient, per row for "none")."""
    h, w, t = inputs(dtype, spelling)
    grad = torch.randn(N_ROWS if reduction == "none" else (), device=DEVICE)
    loss, dh, dw = run(compile_mojo(fn, target), h, w, t, grad)
    assert sites() == [(pattern, "mojo.linear_cross_entropy")]
    eager = run(fn, h, w, t, grad)
    exact = run(fn, h.double(), w.double(), t, grad.double())
    check_as_accurate(loss, eager[0], exact[0], torch.float32, "loss")
    check_as_accurate(dh, eager[1], exact[1], dtype, "dhidden")
    check_as_accurate(dw, eager[2], exact[2], dtype, "dweight")


CASES = [("linear", "mean"), ("matmul", "sum"), ("linear", "none"), ("matmul", "mean")]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("spelling,reduction", CASES, ids=[f"{s}-{r}" for s, r in CASES])
def test_as_accurate_as_eager(target, dtype, spelling, reduction):
    fn = head_loss(spelling, reduction)
    h, w, t = inputs(dtype, spelling)
    grad = torch.randn(N_ROWS if reduction == "none" else (), device=DEVICE)
    loss, dh, dw = run(compile_mojo(fn, target), h, w, t, grad)
    rows = "" if spelling == "linear" else ".rows"
    assert sites() == [(f"linear_cross_entropy.{spelling}.{reduction}{rows}", "mojo.linear_cross_entropy")]
    assert mojo_compile.last_report().counts() == {"mojo.linear_cross_entropy": 1}
    eager = run(fn, h, w, t, grad)
    exact = run(fn, h.double(), w.double(), t, grad.double())
    assert loss.dtype == torch.float32 and loss.shape == eager[0].shape
    assert dh.dtype == dtype and dw.dtype == dtype and dh.shape == h.shape and dw.shape == w.shape
    check_as_accurate(loss, eager[0], exact[0], torch.float32, "loss")
    check_as_accurate(dh, eager[1], exact[1], dtype, "dhidden")
    check_as_accurate(dw, eager[2], exact[2], dtype, "dweight")
    if reduction == "none":
        assert torch.equal(loss[[1, 4, 5]], torch.zeros(3, device=DEVICE))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_every_row_ignored(target, reduction):
    """mean: 0 / 0 = NaN, as eager; sum / none: 0; the gradients are zeros (eager's too)."""
    fn = head_loss("matmul", reduction)
    h, w, t = inputs(torch.float32, "matmul", ignored=range(N_ROWS))
    grad = torch.ones(N_ROWS if reduction == "none" else (), device=DEVICE)
    loss, dh, dw = run(compile_mojo(fn, target), h, w, t, grad)
    assert sites() == [(f"linear_cross_entropy.matmul.{reduction}.rows", "mojo.linear_cross_entropy")]
    eager = run(fn, h, w, t, grad)
    assert torch.equal(loss.isnan(), eager[0].isnan()) and (reduction != "mean" or loss.isnan())
    assert torch.allclose(loss.nan_to_num(), eager[0].nan_to_num())
    for got, ref in ((dh, eager[1]), (dw, eager[2])):
        assert torch.equal(got.isnan(), ref.isnan()) and torch.equal(got.nan_to_num(), ref.nan_to_num())


def saved_numels(fn, h, w, t):
    numels = []

    def pack(x):
        numels.append(x.numel())
        return x

    h, w = h.clone().requires_grad_(), w.clone().requires_grad_()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        fn(h, w, t).backward()
    return numels


@pytest.mark.parametrize("target", TARGETS)
def test_nothing_of_n_by_v_saved(target):
    """Eager saves [N, V] tensors for the backward (the fp32 log-softmax); the fused op saves hidden, weight,
    labels, lse and the gradients its forward computed (dhidden [N, H], dweight [V, H])."""
    fn = head_loss("linear", "mean")
    h, w, t = inputs(torch.bfloat16, "linear")
    assert N_ROWS * VOCAB in saved_numels(fn, h, w, t)
    compiled = compile_mojo(fn, target)
    compiled(h.clone().requires_grad_(), w.clone().requires_grad_(), t)  # compiled first: tracing saves fakes
    fused = saved_numels(compiled, h, w, t)
    assert sites() == [("linear_cross_entropy.linear.mean", "mojo.linear_cross_entropy")]
    assert N_ROWS * VOCAB not in fused, fused
    assert sorted(fused) == sorted([N_ROWS * HID, VOCAB * HID, N_ROWS, N_ROWS, N_ROWS * HID, VOCAB * HID]), fused


@pytest.mark.parametrize("target", TARGETS)
def test_logits_returned_use_the_materialised_form(target):
    """The logits are an output: the matcher rejects the fused head; mojo::cross_entropy takes the loss alone."""
    def fn(h, w, t):
        logits = F.linear(h, w)
        return F.cross_entropy(logits.float().view(-1, w.shape[0]), t), logits

    h, w, t = inputs(torch.bfloat16, "linear")
    compiled = compile_mojo(fn, target)
    (loss, logits), (eager_loss, eager_logits) = compiled(h, w, t), fn(h, w, t)
    assert sites() == [("cross_entropy.mean", "mojo.cross_entropy")]
    assert torch.equal(logits, eager_logits) and torch.allclose(loss, eager_loss, rtol=1e-5)


def _bias(h, w, t, b):
    return F.cross_entropy(F.linear(h, w, b).float(), t)


def _class_weight(h, w, t, b):
    return F.cross_entropy(F.linear(h, w).float(), t, weight=b.float().abs())


def _fp32_head_rounded_to_bf16(h, w, t, b):  # the cast-binding trap: the loss of the bf16 rounding of the logits
    return F.cross_entropy(F.linear(h.float(), w.float()).to(torch.bfloat16).float(), t)


NOT_FUSED = {  # case: (fn, sites, reason of the linear_cross_entropy near miss or None)
    "bias": (_bias, [("cross_entropy.mean.rows", "mojo.cross_entropy")], None),
    "class_weight": (_class_weight, [], "class weight"),
    "fp32_head_rounded_to_bf16": (_fp32_head_rounded_to_bf16, [("cross_entropy.mean.rows", "mojo.cross_entropy")],
                                  None),
}


@pytest.mark.parametrize("case", list(NOT_FUSED))
def test_not_fused(case):
    fn, expected, reason = NOT_FUSED[case]
    h, w, t = inputs(torch.bfloat16, "matmul")
    b = torch.randn(VOCAB, device=DEVICE).to(torch.bfloat16)
    got = compile_mojo(fn, "torch")(h, w, t, b)
    assert sites() == expected
    assert torch.allclose(got, fn(h, w, t, b), rtol=1e-5)
    if reason:
        misses = [m for g in mojo_compile.last_report().graphs for m in g.near_misses]
        # one near miss per unfused site: the loss's tell-tale (cross_entropy_loss) names the materialised form's
        # refusal, which gives the same reason as the fused head's
        assert any(m.family in ("linear_cross_entropy", "cross_entropy") and reason in m.reason for m in misses), \
            misses


def test_op_blockwise_matches_one_block_and_frozen_weight():
    """The reference's blocks change nothing but the GEMMs' split (fp32: to rounding); a frozen weight: no dweight
    computed (None), dhidden unchanged."""
    h, w, t = inputs(torch.float32, "matmul")
    h.requires_grad_()
    loss = mojo.linear_cross_entropy(h, w, t, -100, "sum", target="torch")[0]
    (dh,) = torch.autograd.grad(loss, (h,))
    lce_ops.LCE_BLOCKS = (N_ROWS, VOCAB)
    loss1 = mojo.linear_cross_entropy(h, w, t, -100, "sum", target="torch")[0]
    (dh1,) = torch.autograd.grad(loss1, (h,))
    assert torch.allclose(loss, loss1, rtol=1e-6) and torch.allclose(dh, dh1, rtol=1e-5, atol=1e-6)


def test_op_rejects_bad_arguments():
    h, w, t = inputs(torch.float32, "matmul")
    with pytest.raises(ValueError, match="reduction"):
        mojo.linear_cross_entropy(h, w, t, -100, "max", target="torch")
    with pytest.raises(ValueError, match="weight"):
        mojo.linear_cross_entropy(h, w.to(torch.bfloat16), t, -100, "mean", target="torch")
    with pytest.raises(ValueError, match="labels"):
        mojo.linear_cross_entropy(h, w, t.int(), -100, "mean", target="torch")
    with pytest.raises(ValueError, match="scalar loss"):
        mojo.linear_cross_entropy(h, w, t, -100, "none", True, False, target="torch")
    with pytest.raises(ValueError, match="logit_divisor"):
        mojo.linear_cross_entropy(h, w, t, -100, "mean", logit_divisor=0.0, target="torch")
    with pytest.raises(ValueError, match="logit_scale"):
        mojo.linear_cross_entropy(h, w, t, -100, "mean", logit_scale=float("inf"), target="torch")


@pytest.mark.parametrize("target", TARGETS)
def test_opcheck(target):
    h, w, t = inputs(torch.float32, "matmul")
    for reduction, grads in (("mean", (True, True)), ("sum", (False, True)), ("mean", (False, False)),
                             ("none", (False, False))):
        torch.library.opcheck(mojo.linear_cross_entropy.default,
                              (h.requires_grad_(), w.requires_grad_(), t, -100, reduction, *grads, 0.0, 1.0, 1.0,
                               0.0, target))
    torch.library.opcheck(mojo.linear_cross_entropy.default, (h, w, t, -100, "sum", True, True, 3.0, 1.0, 1.0, 0.0,
                                                              target))
    torch.library.opcheck(mojo.linear_cross_entropy.default, (h, w, t, -100, "mean", True, True, 0.0, 0.5, 3.0,
                                                              0.25, target))


@pytest.fixture
def forward_grads(monkeypatch):
    """(hidden_grad, weight_grad) of each linear_cross_entropy forward the op runs (the arguments before softcap,
    logit_scale, logit_divisor and label_smoothing),
    and ("recomputed", ...) of each backward that recomputes the logits."""
    seen, call = [], lowering.call

    def spy(name, target, *args):
        if name == "linear_cross_entropy":
            seen.append(tuple(args[-6:-4]))
        if name == "linear_cross_entropy_backward":
            seen.append(("recomputed", *args[-6:-4]))
        return call(name, target, *args)
    monkeypatch.setattr(lowering, "call", spy)
    return seen


@pytest.mark.parametrize("target", TARGETS)
def test_gradients_in_forward_where_autograd_wants_them(target, forward_grads):
    """The forward computes the gradients autograd will ask for -- both; dhidden only under a frozen head; none
    under no_grad or for a per-row loss -- and each result is eager's (the frozen head: no dweight at all)."""
    fn = head_loss("linear", "mean")
    h, w, t = inputs(torch.bfloat16, "linear")
    exact = run(fn, h.double(), w.double(), t, torch.tensor(1.0, dtype=torch.float64, device=DEVICE))
    eager = run(fn, h, w, t, torch.tensor(1.0, device=DEVICE))

    loss, dh, dw = run(compile_mojo(fn, target), h, w, t, torch.tensor(1.0, device=DEVICE))
    assert forward_grads == [(True, True)]  # and no backward recomputing the logits
    check_as_accurate(dw, eager[2], exact[2], torch.bfloat16, "dweight")

    hf = h.detach().clone().requires_grad_()
    compile_mojo(fn, target)(hf, w, t).backward()  # w frozen
    assert forward_grads[-1] == (True, False) and w.grad is None
    check_as_accurate(hf.grad, eager[1], exact[1], torch.bfloat16, "dhidden (frozen head)")

    with torch.no_grad():
        loss = compile_mojo(fn, target)(h, w, t)
    assert forward_grads[-1] == (False, False)
    check_as_accurate(loss, eager[0], exact[0], torch.float32, "loss (no_grad)")

    run(compile_mojo(head_loss("linear", "none"), target), h, w, t, torch.ones(N_ROWS, device=DEVICE))
    assert forward_grads[-2:] == [(False, False), ("recomputed", True, True)]


@pytest.mark.parametrize("target", TARGETS)
def test_backward_twice_and_scaled(target):
    """The forward's gradients are scaled by each backward's upstream gradient, never in place: two backwards
    through one graph (retain_graph) accumulate g1 * grad + g2 * grad, as eager."""
    fn = head_loss("matmul", "sum")
    h, w, t = inputs(torch.float32, "matmul")
    got, want = [], []
    for f, out in ((compile_mojo(fn, target), got), (fn, want)):
        hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()
        loss = f(hh, ww, t)
        loss.backward(torch.tensor(0.5, device=DEVICE), retain_graph=True)
        loss.backward(torch.tensor(-3.0, device=DEVICE))
        out += [hh.grad, ww.grad]
    assert sites() == [("linear_cross_entropy.matmul.sum.rows", "mojo.linear_cross_entropy")]
    for a, b in zip(got, want):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5)  # fp32, one GEMM split against another


@pytest.mark.parametrize("target", TARGETS)
def test_gradient_of_lse_recomputes(target):
    """Where lse has a gradient too, the backward recomputes the logits (the forward's gradients know only the
    loss's): loss + sum(lse) against fp64 autograd through explicit logits."""
    h, w, t = inputs(torch.float32, "matmul")
    hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()
    loss, lse, _, _ = mojo.linear_cross_entropy(hh, ww, t, -100, "mean", True, True, target=target)
    (loss + lse.sum()).backward()
    h64, w64 = h.double().requires_grad_(), w.double().requires_grad_()
    logits = h64 @ w64.T
    (F.cross_entropy(logits, t) + torch.logsumexp(logits, -1).sum()).backward()
    assert torch.allclose(hh.grad.double(), h64.grad, rtol=1e-4, atol=1e-6)
    assert torch.allclose(ww.grad.double(), w64.grad, rtol=1e-4, atol=1e-6)


def softcapped_loss(c_div, c_mul, reduction="mean"):
    """HF Gemma2's spelling: lm_head, `/ c`, tanh, `* c`, then the causal-LM loss on the flattened fp32 logits."""
    def fn(h, w, t):
        x = torch.tanh(F.linear(h, w) / c_div) * c_mul
        return F.cross_entropy(x.float().view(-1, w.shape[0]), t, reduction=reduction)
    return fn


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_softcap_as_accurate_as_eager(target, dtype, reduction):
    """Gemma2's final softcap between head and loss: fused (the softcap inside the op), loss, dhidden and dweight
    as accurate as eager against fp64. c = 3 with logits of scale ~4: the tanh saturates part of them."""
    fn = softcapped_loss(3.0, 3.0, reduction)
    check_fused_as_accurate(fn, target, dtype, reduction, f"linear_cross_entropy.softcap.{reduction}")


@pytest.mark.parametrize("target", TARGETS)
def test_softcap_of_two_constants_is_not_fused(target):
    """`/ 3` then `* 2` is no softcap: the head is not fused (the loss on the materialised logits is)."""
    fn = softcapped_loss(3.0, 2.0)
    h, w, t = inputs(torch.bfloat16, "linear")
    loss = compile_mojo(fn, target)(h, w, t)
    assert [op for _, op in sites()] == ["mojo.cross_entropy"]
    assert torch.allclose(loss, fn(h, w, t), rtol=1e-3)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("spelling,reduction", CASES, ids=[f"{s}-{r}" for s, r in CASES])
@pytest.mark.parametrize("eps", [0.1, 1.0])
def test_label_smoothing_as_accurate_as_eager(target, dtype, spelling, reduction, eps):
    """label_smoothing inside the fused head (the rows' sums of logits in the forward, the uniform part of dlogits
    in every gradient pass); loss, dhidden and dweight as accurate as eager against fp64."""
    def fn(h, w, t):
        x = F.linear(h, w) if spelling == "linear" else h @ w.T
        x = x.float()
        return F.cross_entropy(x.view(-1, w.shape[0]) if spelling == "linear" else x, t, reduction=reduction,
                               label_smoothing=eps)

    rows = "" if spelling == "linear" else ".rows"
    check_fused_as_accurate(fn, target, dtype, reduction, f"linear_cross_entropy.{spelling}.{reduction}{rows}",
                            spelling)


@pytest.mark.parametrize("target", TARGETS)
def test_label_smoothing_with_a_softcap(target):
    """Gemma2's softcap and label smoothing together: the rows' sums are of the capped logits."""
    def fn(h, w, t):
        x = torch.tanh(F.linear(h, w) / 3.0) * 3.0
        return F.cross_entropy(x.float().view(-1, w.shape[0]), t, label_smoothing=0.2)

    check_fused_as_accurate(fn, target, torch.bfloat16, "mean", "linear_cross_entropy.softcap.mean")


def scaled_loss(scaling, s, reduction="mean"):
    """HF's spellings of a final logit scale: Cohere's `lm_head(h) * s`, Granite's `lm_head(h) / s`, then the
    causal-LM loss on the flattened fp32 logits."""
    def fn(h, w, t):
        x = F.linear(h, w)
        x = x * s if scaling == "scale" else x / s
        return F.cross_entropy(x.float().view(-1, w.shape[0]), t, reduction=reduction)
    return fn


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("scaling,s", [("scale", 0.375), ("divisor", 3.0), ("divisor", 7)],
                         ids=["scale", "divisor", "int-divisor"])
def test_logit_scale_as_accurate_as_eager(target, dtype, reduction, scaling, s):
    """A final logit scale between head and loss: fused (the scale inside the op), loss, dhidden and dweight as
    accurate as eager against fp64; an int divisor as a float one."""
    fn = scaled_loss(scaling, s, reduction)
    check_fused_as_accurate(fn, target, dtype, reduction, f"linear_cross_entropy.{scaling}.{reduction}")


@pytest.mark.parametrize("target", TARGETS)
def test_logit_scale_inside_the_op_is_the_spelling(target):
    """The op's scale and divisor against the plain loss on logits scaled outside it: the same bf16 logits either
    way (torch's own `* s` and `/ s` in bf16, each rounded once), so the losses agree to fp32's rounding."""
    h, w, t = inputs(torch.bfloat16, "matmul")
    for kwargs, scaled in (({"logit_scale": 0.375}, lambda z: z * 0.375), ({"logit_divisor": 3.0}, lambda z: z / 3.0)):
        fused = mojo.linear_cross_entropy(h, w, t, -100, "sum", target=target, **kwargs)[0]
        plain = F.cross_entropy(scaled(h @ w.T).float(), t, reduction="sum")
        assert torch.allclose(fused, plain, rtol=1e-5), kwargs


@pytest.mark.parametrize("target", TARGETS)
def test_logit_scale_by_a_tensor_is_not_fused(target):
    """`* s` with s a tensor (a learned scale) is not a literal: the head is not fused (the loss on the
    materialised logits is)."""
    s = torch.tensor(0.5, device=DEVICE)

    def fn(h, w, t):
        return F.cross_entropy((F.linear(h, w) * s).float().view(-1, w.shape[0]), t)

    h, w, t = inputs(torch.bfloat16, "linear")
    loss = compile_mojo(fn, target)(h, w, t)
    assert [op for _, op in sites()] == ["mojo.cross_entropy"]
    assert torch.allclose(loss, fn(h, w, t), rtol=1e-3)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_second_order_gradient(target, reduction):
    """A gradient of the gradients (create_graph=True, then backward): eager's Hessian-vector products, through
    the reference's differentiable loss (the forward's scaled gradients would drop the terms through them); the
    first-order and second-order gradients as accurate as eager's against an fp64 copy (blockwise sums round
    differently from eager's one GEMM: on the GPU they differ from eager's by more than fp32's last bits)."""
    fn = head_loss("matmul", reduction)
    h, w, t = inputs(torch.float32, "matmul")
    grad = torch.rand(N_ROWS if reduction == "none" else (), device=DEVICE) + 0.5
    got = []
    for f, dtype in ((compile_mojo(fn, target), torch.float32), (fn, torch.float32), (fn, torch.float64)):
        hh, ww = h.to(dtype).clone().requires_grad_(), w.to(dtype).clone().requires_grad_()
        dh, dw = torch.autograd.grad(f(hh, ww, t), (hh, ww), grad.to(dtype), create_graph=True)
        (dh.square().sum() + (dw * dw.detach().sign()).sum()).backward()
        got.append((dh.detach(), hh.grad, ww.grad))
        if f is not fn:
            assert sites() == [(f"linear_cross_entropy.matmul.{reduction}.rows", "mojo.linear_cross_entropy")]
    for what, mine, eager, exact in zip(("dhidden", "dhidden's gradient", "dweight's gradient"), *got):
        check_as_accurate(mine, eager, exact, torch.float32, what)


@pytest.mark.parametrize("target", TARGETS)
def test_second_order_gradient_of_a_head_computed_from_the_hidden(target):
    """`F.linear(h, h)` (a contrastive loss: every row scored against every row), with create_graph=True: the
    weight is the hidden itself. The differentiable backward took autograd.grad at the saved tensors, so the
    hidden's gradient also counted the path through the weight (computed from it) and came out about twice
    eager's. Each input now goes through its own alias (reference.differentiable_grads)."""
    def fn(h, t):
        return F.cross_entropy(F.linear(h, h), t)

    # rows of norm ~1.4, as a contrastive loss scores normalised embeddings: with randn rows the diagonal logits
    # (~32) saturate the softmax, and both fp32 runs lose the second-order terms to cancellation
    h = torch.randn(N_ROWS, HID, device=DEVICE) / 4
    t = torch.randint(0, N_ROWS, (N_ROWS,), device=DEVICE)
    got = []
    for f, dtype in ((compile_mojo(fn, target), torch.float32), (fn, torch.float32), (fn, torch.float64)):
        hh = h.to(dtype).clone().requires_grad_()
        (dh,) = torch.autograd.grad(f(hh, t), (hh,), create_graph=True)
        dh.square().sum().backward()
        got.append((dh.detach(), hh.grad))
        if f is not fn:
            assert [op for _, op in sites()] == ["mojo.linear_cross_entropy"]
    for what, mine, eager, exact in zip(("dhidden", "dhidden's gradient"), *got):
        check_as_accurate(mine, eager, exact, torch.float32, what)


@pytest.mark.parametrize("target", TARGETS)
def test_enable_grad_inside_no_grad(target, forward_grads):
    """Compiled under no_grad, a loss inside `with torch.enable_grad()` still wants its gradients: they are
    computed in the forward, and autograd gets eager's."""
    fn = head_loss("linear", "sum")
    h, w, t = inputs(torch.float32, "linear")
    hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()

    def step(h, w, t):
        with torch.enable_grad():
            return fn(h, w, t)
    with torch.no_grad():
        loss = compile_mojo(step, target)(hh, ww, t)
    loss.backward()
    assert forward_grads == [(True, True)]
    hr, wr = h.clone().requires_grad_(), w.clone().requires_grad_()
    fn(hr, wr, t).backward()
    assert torch.allclose(hh.grad, hr.grad, rtol=1e-4, atol=1e-6) and torch.allclose(ww.grad, wr.grad, rtol=1e-4,
                                                                                      atol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_fp16_gradients_not_in_the_forward(target, forward_grads):
    """fp16: the forward computes no gradients (those of an upstream gradient of 1, rounded to fp16, lose what
    eager's keep); the backward recomputes them, as accurate as eager's."""
    fn = head_loss("linear", "mean")
    h, w, t = inputs(torch.float16, "linear")
    loss, dh, dw = run(compile_mojo(fn, target), h, w, t, torch.tensor(1.0, device=DEVICE))
    assert forward_grads == [(False, False), ("recomputed", True, True)]
    eager = run(fn, h, w, t, torch.tensor(1.0, device=DEVICE))
    exact = run(fn, h.double(), w.double(), t, torch.tensor(1.0, dtype=torch.float64, device=DEVICE))
    check_as_accurate(dh, eager[1], exact[1], torch.float16, "dhidden")
    check_as_accurate(dw, eager[2], exact[2], torch.float16, "dweight")


def test_fp16_loss_scaling_and_sum_over_items():
    """The two fp16 cases that gradients of g = 1 got wrong: a loss scaled by 65536 (GradScaler) with a mean over
    4096 rows (dlogits ~ 1e-7 sink into fp16's subnormals before the scaling), and HF's sum / num_items with one
    frequent token (dweight of the sum, ~ -8e4, overflows fp16 before the division)."""
    torch.manual_seed(0)

    def mean_loss(h, w, t):
        return F.cross_entropy((h @ w.T).float(), t)

    def sum_over_items(h, w, t):
        return F.cross_entropy(F.linear(h, w).float().view(-1, w.shape[0]), t, reduction="sum") / 4096

    n = 4096
    cases = [(mean_loss, torch.randn(n, 64), torch.randn(1024, 64) / 4, torch.randint(0, 1024, (n,)), 65536.0),
             (sum_over_items, 20 + torch.randn(1, n, 16), torch.randn(64, 16) / 16, torch.zeros(n, dtype=torch.long),
              1.0)]
    for fn, h, w, t, scale in cases:
        h, w, t = h.half().to(DEVICE), w.half().to(DEVICE), t.to(DEVICE)
        g = torch.tensor(scale, device=DEVICE)
        mojo_compile.reset_report()
        got = run(compile_mojo(fn, "torch"), h, w, t, g)
        assert [op for _, op in sites()] == ["mojo.linear_cross_entropy"]
        eager = run(fn, h, w, t, g)
        exact = run(fn, h.double(), w.double(), t, g.double())
        assert got[2].isfinite().all()
        check_as_accurate(got[1], eager[1], exact[1], torch.float16, f"{fn.__name__} dhidden")
        check_as_accurate(got[2], eager[2], exact[2], torch.float16, f"{fn.__name__} dweight")


@pytest.mark.parametrize("target", TARGETS)
def test_dynamic_rows_fuse(target):
    """dynamic=True: a symbolic row count still fuses HF's spelling (`view(-1, vocab_size)` with the class count a
    literal), two batch shapes through one graph, each loss and gradient as eager's."""
    def fn(h, w, t):
        return F.cross_entropy(F.linear(h, w).float().view(-1, VOCAB), t)
    compiled = torch.compile(fn, backend="mojo", options={"inner_compiler": "eager", "target": target},
                             dynamic=True)
    for rows in (3, 5):
        h = torch.randn(2, rows, HID, device=DEVICE).to(torch.bfloat16)
        w = (torch.randn(VOCAB, HID, device=DEVICE) / 2).to(torch.bfloat16)
        t = torch.randint(0, VOCAB, (2 * rows,), device=DEVICE)
        one = torch.tensor(1.0, device=DEVICE)
        got, eager, exact = run(compiled, h, w, t, one), run(fn, h, w, t, one), run(fn, h.double(), w.double(), t,
                                                                                     one.double())
        assert [op for _, op in sites()] == ["mojo.linear_cross_entropy"]
        assert len(mojo_compile.last_report().graphs) == 1  # the second shape reuses the graph
        for what, a, b, c, dtype in zip(("loss", "dhidden", "dweight"), got, eager, exact,
                                        (torch.float32, torch.bfloat16, torch.bfloat16)):
            check_as_accurate(a, b, c, dtype, f"{what} ({rows} rows)")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_an_overflowing_fp16_logit_gives_nan_as_eager(reduction, target):
    """The fused LM head + loss in fp16 where one logit overflows to +inf: that row's loss and its whole row of
    dlogits are NaN as eager's (so NaN reaches every column of dweight and the row of dhidden); the blockwise
    reference's logsumexp / logaddexp made its lse +inf (loss +inf, 8 NaNs in dweight where eager has 88)."""
    V, H = 11, 8
    torch.manual_seed(0)
    h, w = torch.randn(2, 3, H, device=DEVICE).half(), (torch.randn(V, H, device=DEVICE) / 2).half()
    h[0, 0], w[3] = 200.0, 100.0  # row 0, column 3: 160000 -> +inf in fp16
    t = torch.randint(0, V, (6,), device=DEVICE)
    t[0] = 1

    def fn(h, w, t):
        return F.cross_entropy(F.linear(h, w).float().view(-1, V), t, reduction=reduction)

    results = []
    for f in (fn, compile_mojo(fn, target)):
        hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()
        loss = f(hh, ww, t)
        loss.sum().backward()
        results.append((loss.detach(), hh.grad, ww.grad))
    assert [s[0] for s in sites()] == [f"linear_cross_entropy.linear.{reduction}"]
    for got, eager in zip(results[1], results[0]):
        assert torch.equal(got.isnan(), eager.isnan()), (got, eager)
