"""Adversarial cases for the two loss families (patterns/cross_entropy.py -> mojo::cross_entropy, patterns/
linear_cross_entropy.py -> mojo::linear_cross_entropy): spellings, shapes, dtypes and keyword arguments a pattern
might take for one it models, an LM head next to other users of its weight or logits, gradients of every input
(second order included), and the user's tensors left as they were. Each case: the compiled function's loss and
gradients as accurate as eager's against an fp64 copy (test_cross_entropy.check_as_accurate: at most twice eager's
error plus one rounding of the output dtype -- the fused op sums in another order, never worse than eager), and the
sites it fused (or that it fused none: then eager's numbers bit for bit). Tiny sizes: the whole file runs in well
under a minute on a CPU."""
import pytest
import torch
import torch.nn.functional as F

import mojo_compile
from conftest import DEVICE, TARGETS
from test_cross_entropy import check_as_accurate, compile_mojo

BF16, FP32, FP64 = torch.bfloat16, torch.float32, torch.float64
V, H = 11, 8  # classes (odd: no block fits exactly), hidden size
CE = "mojo.cross_entropy"
LCE = "mojo.linear_cross_entropy"


def f32(x):
    """`.float()` as the model spells it; an fp64 reference keeps its precision (`.float()` would round it)."""
    return x if x.dtype == FP64 else x.float()


def sites():
    return [(s.pattern, s.op) for s in mojo_compile.last_report().sites]


def forward_backward(fn, args, wrt, grad):
    """(loss, gradients of args[i] for i in wrt); the loss is the first output where fn returns several."""
    args = [a.detach().clone().requires_grad_() if i in wrt else a for i, a in enumerate(args)]
    out = fn(*args)
    loss = out[0] if isinstance(out, tuple) else out
    loss.backward(grad.to(loss.dtype))
    return loss.detach(), [args[i].grad for i in wrt]


def as_fp64(args):
    return [a.double() if a.is_floating_point() else a for a in args]


def check(fn, args, wrt, expected, target="torch", grad=None):
    """fn compiled fuses `expected` (a list of (pattern, op)); loss and gradients as accurate as eager's against
    fp64. With nothing fused: eager's numbers exactly."""
    loss = fn(*args)
    loss = loss[0] if isinstance(loss, tuple) else loss
    grad = torch.randn(loss.shape, device=DEVICE) if grad is None else grad
    got = forward_backward(compile_mojo(fn, target), args, wrt, grad)
    assert sites() == expected
    eager = forward_backward(fn, args, wrt, grad)
    exact = forward_backward(fn, as_fp64(args), wrt, grad.double())
    for i, (mine, ref, ref64) in enumerate(zip([got[0], *got[1]], [eager[0], *eager[1]], [exact[0], *exact[1]])):
        what = "loss" if i == 0 else f"gradient of argument {wrt[i - 1]}"
        assert mine.shape == ref.shape and mine.dtype == ref.dtype, (what, mine.shape, mine.dtype, ref.dtype)
        if not expected:
            assert torch.equal(mine, ref), what
        else:
            check_as_accurate(mine, ref, ref64, FP32 if i == 0 else mine.dtype, what)


def logits(*shape, dtype=BF16):
    return (torch.randn(*shape, device=DEVICE) * 3).to(dtype)


def labels(*shape, classes=V, ignored=(1,)):
    t = torch.randint(0, classes, shape, device=DEVICE)
    t.view(-1)[list(ignored)] = -100
    return t


# ----------------------------------------------------------------------------------- the loss on its logits
def _shift(x, t):  # HF's shift, made contiguous
    x = f32(x[..., :-1, :].contiguous())
    return F.cross_entropy(x.view(-1, V), t[..., 1:].contiguous().view(-1))


def _shift_strided(x, t):  # the shift without contiguous(): reshape copies
    return F.cross_entropy(f32(x[..., :-1, :]).reshape(-1, V), t[..., 1:].reshape(-1))


def _to_fp32(x, t):
    return F.cross_entropy((x if x.dtype == FP64 else x.to(torch.float32)).view(-1, V), t)


def _type_fp32(x, t):
    return F.cross_entropy((x if x.dtype == FP64 else x.type(torch.float32)).view(-1, V), t)


MEAN, ROWS = [("cross_entropy.mean", CE)], [("cross_entropy.mean.rows", CE)]
SPELLINGS = {  # case: (fn, inputs, sites)
    "view": (lambda x, t: F.cross_entropy(f32(x).view(-1, V), t), lambda: (logits(2, 3, V), labels(6)), MEAN),
    "reshape": (lambda x, t: F.cross_entropy(f32(x).reshape(-1, V), t), lambda: (logits(2, 3, V), labels(6)), ROWS),
    "flatten": (lambda x, t: F.cross_entropy(f32(x).flatten(0, 1), t), lambda: (logits(2, 3, V), labels(6)), ROWS),
    "to_fp32": (_to_fp32, lambda: (logits(2, 3, V), labels(6)), MEAN),
    "type_fp32": (_type_fp32, lambda: (logits(2, 3, V), labels(6)), MEAN),
    "fp16": (lambda x, t: F.cross_entropy(f32(x).view(-1, V), t), lambda: (logits(2, 3, V, dtype=torch.float16),
                                                                          labels(6)), MEAN),
    "hf_shift": (_shift, lambda: (logits(2, 4, V), labels(2, 4)), MEAN),
    "hf_shift_strided": (_shift_strided, lambda: (logits(2, 4, V), labels(2, 4)), ROWS),
    "logits_to_keep": (lambda x, t: F.cross_entropy(f32(x[:, -2:, :]).reshape(-1, V), t),
                       lambda: (logits(2, 5, V), labels(4)), ROWS),
    "transposed_fp32": (lambda x, t: F.cross_entropy(x.t(), t), lambda: (logits(V, 6, dtype=FP32), labels(6)), ROWS),
    "column_slice": (lambda x, t: F.cross_entropy(f32(x[:, 1:V + 1]), t), lambda: (logits(6, V + 3), labels(6)), ROWS),
    "one_class": (lambda x, t: F.cross_entropy(f32(x).view(-1, 1), t),
                  lambda: (logits(2, 3, 1), labels(6, classes=1)), MEAN),
    "one_row": (lambda x, t: F.cross_entropy(f32(x), t), lambda: (logits(1, V), labels(1, ignored=())), ROWS),
    "one_d_viewed": (lambda x, t: F.cross_entropy(f32(x).view(-1, V), t),
                     lambda: (logits(V), labels(1, ignored=())), MEAN),
    # another view of the logits than [N, V]: the pattern's re-trace with these shapes viewed [N, V] against the
    # labels and the compile raised where eager runs; now not the flattening pattern (the [N, V] one takes it)
    "another_view_fp32": (lambda x, t: F.cross_entropy(x.view(3, 2 * V), t),
                          lambda: (logits(2, 3, V, dtype=FP32), labels(3, classes=2 * V)), ROWS),
    "another_view_bf16": (lambda x, t: F.cross_entropy(f32(x).view(3, 2 * V), t),
                          lambda: (logits(2, 3, V), labels(3, classes=2 * V)), ROWS),
    # left to eager
    "cast_to_fp64": (lambda x, t: F.cross_entropy(x.double().view(-1, V), t), lambda: (logits(2, 3, V), labels(6)),
                     []),
    "bf16_without_the_cast": (lambda x, t: F.cross_entropy(x.view(-1, V), t), lambda: (logits(2, 3, V), labels(6)),
                              []),
    "one_d_logits": (lambda x, t: F.cross_entropy(f32(x), t), lambda: (logits(V), labels(ignored=())), []),
    "probabilities_of_another_view": (lambda x, t: F.cross_entropy(f32(x).view(3, 2 * V), t),
                                      lambda: (logits(2, 3, V), torch.rand(3, 2 * V, device=DEVICE).softmax(-1)), []),
}


@pytest.mark.parametrize("case", list(SPELLINGS))
def test_loss_spellings_and_shapes(case):
    fn, make, expected = SPELLINGS[case]
    check(fn, make(), (0,), expected)


KWARGS = [("mean", -100, 0.1), ("sum", -1, 1.0), ("none", 3, 0.0), ("mean", 3, 0.25), ("none", -7, 1)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("reduction,ignore_index,smoothing", KWARGS, ids=[f"{r}-{i}-{s}" for r, i, s in KWARGS])
def test_loss_keywords(target, reduction, ignore_index, smoothing):
    """Every reduction; ignore_index -100, negative others, and a valid class that occurs in the labels (those rows
    are ignored, the class still counts in the softmax); label_smoothing 0 / between / 1 (an int 1 too)."""
    t = labels(9, ignored=(2, 5))
    t[[2, 5]] = ignore_index
    t[7] = 3  # the class 3 occurs: ignored where ignore_index is 3, a target elsewhere

    def fn(x, t):
        return F.cross_entropy(f32(x), t, ignore_index=ignore_index, reduction=reduction, label_smoothing=smoothing)

    check(fn, (logits(9, V), t), (0,), [(f"cross_entropy.{reduction}.rows", CE)], target)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_every_row_ignored_with_label_smoothing(reduction):
    """mean over no rows: NaN as eager's (the smoothed term is masked too); the gradient zero."""
    x, t = logits(2, 3, V), torch.full((6,), -100, device=DEVICE)

    def fn(x, t):
        return F.cross_entropy(f32(x).view(-1, V), t, reduction=reduction, label_smoothing=0.2)

    grad = torch.ones(6 if reduction == "none" else (), device=DEVICE)
    got = forward_backward(compile_mojo(fn, "torch"), (x, t), (0,), grad)
    assert sites() == [(f"cross_entropy.{reduction}", CE)]
    eager = forward_backward(fn, (x, t), (0,), grad)
    assert torch.equal(got[0].isnan(), eager[0].isnan()) and bool(got[0].isnan().all()) == (reduction == "mean")
    assert torch.equal(got[0].nan_to_num(), eager[0].nan_to_num())
    assert torch.equal(got[1][0], eager[1][0]) and not got[1][0].any()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_loss_second_order_gradient(target, reduction):
    """A gradient of the gradient through the loss on materialised logits (torch.autograd.grad with
    create_graph=True, then backward): mojo::cross_entropy_backward has no autograd formula, so the compiled one
    raised where eager's ran; now autograd through the op's torch reference. dlogits and its gradient as accurate
    as eager's against fp64."""
    x, t = logits(7, V, dtype=FP32), labels(7, ignored=(2,))
    grad = torch.rand(7 if reduction == "none" else (), device=DEVICE) + 0.5

    def fn(x, t):
        return F.cross_entropy(x, t, reduction=reduction, label_smoothing=0.1)

    results = []
    for f, dtype in ((compile_mojo(fn, target), FP32), (fn, FP32), (fn, FP64)):
        xx = x.detach().to(dtype).clone().requires_grad_()
        (dx,) = torch.autograd.grad(f(xx, t), (xx,), grad.to(dtype), create_graph=True)
        (dx.square().sum() + dx[:, 0].sum()).backward()
        results.append((dx.detach(), xx.grad))
        if f is not fn:
            assert sites() == [(f"cross_entropy.{reduction}.rows", CE)]
    for what, mine, eager, exact in zip(("dlogits", "dlogits' gradient"), *results):
        check_as_accurate(mine, eager, exact, FP32, what)


@pytest.mark.parametrize("target", TARGETS)
def test_loss_backward_twice(target):
    """retain_graph: two backwards through one compiled loss accumulate, as eager's."""
    x, t = logits(2, 3, V), labels(6)

    def fn(x, t):
        return F.cross_entropy(f32(x).view(-1, V), t, label_smoothing=0.1)

    grads = []
    for f in (compile_mojo(fn, target), fn):
        xx = x.clone().requires_grad_()
        loss = f(xx, t)
        loss.backward(torch.tensor(0.5, device=DEVICE), retain_graph=True)
        loss.backward(torch.tensor(-2.0, device=DEVICE))
        grads.append(xx.grad.float())
    assert torch.allclose(grads[0], grads[1], rtol=2e-2, atol=1e-3)  # bf16 dlogits, rounded per backward


# ----------------------------------------------------------------------------------- the LM head with the loss
def _bias(h, w, t, b):
    return F.cross_entropy(f32(F.linear(h, w, b)).view(-1, V), t)


def _tied(h, w, t, b):  # the head's weight also embeds the inputs
    return F.cross_entropy(f32(F.linear(h + F.embedding(t.clamp(0).view(2, 3), w), w)).view(-1, V), t)


def _weight_also_used(h, w, t, b):
    return F.cross_entropy(f32(F.linear(h, w)).view(-1, V), t) + 1e-2 * f32(w).square().sum()


def _logits_returned(h, w, t, b):
    z = F.linear(h, w)
    return F.cross_entropy(f32(z).view(-1, V), t), z


def _fp32_logits_returned(h, w, t, b):
    z = f32(F.linear(h, w))
    return F.cross_entropy(z.view(-1, V), t), z


def head(logit_fn, reduction="mean", after=None, **kwargs):
    """The loss of `logit_fn(F.linear(h, w))` in HF's spelling, then `after(loss)`."""
    def fn(h, w, t, b):
        loss = F.cross_entropy(f32(logit_fn(F.linear(h, w))).view(-1, V), t, reduction=reduction, **kwargs)
        return after(loss) if after else loss
    return fn


def fused(pattern):
    return [(f"linear_cross_entropy.{pattern}", LCE)]


HEADS = {  # case: (fn, sites, the arguments differentiated)
    "plain": (head(lambda z: z), fused("linear.mean"), (0, 1)),
    "bias": (_bias, MEAN, (0, 1, 3)),
    "tied_embedding": (_tied, fused("linear.mean"), (0, 1)),
    "weight_also_used": (_weight_also_used, fused("linear.mean"), (0, 1)),
    "logits_returned": (_logits_returned, MEAN, (0, 1)),
    "fp32_logits_returned": (_fp32_logits_returned, MEAN, (0, 1)),
    "softcap": (head(lambda z: torch.tanh(z / 3.0) * 3.0), fused("softcap.mean"), (0, 1)),
    "softcap_two_constants": (head(lambda z: torch.tanh(z / 3.0) * 2.0), MEAN, (0, 1)),
    "softcap_negative": (head(lambda z: torch.tanh(z / -3.0) * -3.0), MEAN, (0, 1)),
    "softcap_int": (head(lambda z: torch.tanh(z / 3) * 3), MEAN, (0, 1)),
    "softcap_multiplied_inside": (head(lambda z: torch.tanh(z * 0.5) * 0.5), MEAN, (0, 1)),
    "tanh_alone": (head(lambda z: torch.tanh(z / 3.0)), MEAN, (0, 1)),
    "tanh_without_the_division": (head(lambda z: torch.tanh(z) * 3.0), MEAN, (0, 1)),
    "scale_and_softcap": (head(lambda z: torch.tanh(z * 0.5 / 3.0) * 3.0), MEAN, (0, 1)),
    "scale_0": (head(lambda z: z * 0.0), fused("scale.mean"), (0, 1)),
    "scale_negative": (head(lambda z: z * -0.5), fused("scale.mean"), (0, 1)),
    "scale_on_the_left": (head(lambda z: 0.5 * z), fused("scale.mean"), (0, 1)),
    "divisor_negative": (head(lambda z: z / -0.5), fused("divisor.mean"), (0, 1)),
    "divisor_inf": (head(lambda z: z / float("inf")), MEAN, (0, 1)),
    "hidden_frozen": (head(lambda z: z), fused("linear.mean"), (1,)),
    "weight_frozen": (head(lambda z: z), fused("linear.mean"), (0,)),
    "sum_over_num_items": (head(lambda z: z, "sum", lambda loss: loss / 5), fused("linear.sum"), (0, 1)),
    "loss_scaled_and_shifted": (head(lambda z: z, after=lambda loss: loss * 3 + 1), fused("linear.mean"), (0, 1)),
    "rows_weighted": (head(lambda z: z, "none", lambda loss: loss * torch.arange(6.0, device=loss.device)),
                      fused("linear.none"), (0, 1)),
    "ignore_a_valid_class_smoothed": (head(lambda z: z, ignore_index=3, label_smoothing=0.3), fused("linear.mean"),
                                      (0, 1)),
    # another view of the logits than [N, V] (as the loss's above): the compile raised; now the [N, V] loss alone
    "another_view": (lambda h, w, t, b: F.cross_entropy(f32(F.linear(h, w)).view(3, 2 * V), t[:3].clamp(0)), ROWS,
                     (0, 1)),
    "softcap_another_view": (lambda h, w, t, b: F.cross_entropy(f32(torch.tanh(F.linear(h, w) / 3.0) * 3.0)
                                                                .view(3, 2 * V), t[:3].clamp(0)), ROWS, (0, 1)),
}


HEAD_CASES = [(case, BF16) for case in HEADS] + \
    [(case, FP32) for case in ("plain", "bias", "softcap", "scale_negative", "another_view")]  # (no cast: no node)


@pytest.mark.parametrize("case,dtype", HEAD_CASES,
                         ids=[f"{c}-{'bf16' if d == BF16 else 'fp32'}" for c, d in HEAD_CASES])
def test_lm_head_with_the_loss(case, dtype):
    fn, expected, wrt = HEADS[case]
    h = torch.randn(2, 3, H, device=DEVICE).to(dtype)
    w = (torch.randn(V, H, device=DEVICE) / 2).to(dtype)
    t = labels(6)
    t[4] = 3  # (ignore_index=3 ignores it)
    if case == "ignore_a_valid_class_smoothed":
        t[1] = 3  # (-100 is out of range there: eager raises)
    b = torch.randn(V, device=DEVICE).to(dtype)
    check(fn, (h, w, t, b), wrt, expected)


@pytest.mark.parametrize("target", TARGETS)
def test_lm_head_second_order_softcapped_and_smoothed(target):
    """create_graph=True through the fused head with a softcap and label smoothing: eager's second order."""
    fn = head(lambda z: torch.tanh(z / 3.0) * 3.0, label_smoothing=0.2)
    h, w, t = torch.randn(2, 3, H, device=DEVICE), torch.randn(V, H, device=DEVICE) / 2, labels(6)
    results = []
    for f, dtype in ((compile_mojo(fn, target), FP32), (fn, FP32), (fn, FP64)):
        hh, ww = (a.detach().to(dtype).clone().requires_grad_() for a in (h, w))
        dh, dw = torch.autograd.grad(f(hh, ww, t, None), (hh, ww), create_graph=True)
        (dh.square().sum() + dw.sum()).backward()
        results.append((dh.detach(), dw.detach(), hh.grad, ww.grad))
        if f is not fn:
            assert sites() == fused("softcap.mean")
    for what, mine, eager, exact in zip(("dhidden", "dweight", "dhidden's gradient", "dweight's gradient"),
                                        *results):
        check_as_accurate(mine, eager, exact, FP32, what)


# ----------------------------------------------------------------------------------- the user's tensors
@pytest.mark.parametrize("target", TARGETS)
def test_inputs_left_unchanged(target):
    """The ops write their chunks, logits and gradients into buffers of their own: after the forward and the
    backward of a softcapped head, a scaled head and a loss on logits, every input is bit for bit what it was."""
    h, w, t = torch.randn(2, 3, H, device=DEVICE).to(BF16), (torch.randn(V, H, device=DEVICE) / 2).to(BF16), labels(6)
    x = logits(2, 3, V)
    cases = [(head(lambda z: torch.tanh(z / 3.0) * 3.0, label_smoothing=0.1), (h, w, t, None), "softcap.mean"),
             (head(lambda z: z * 0.5, "sum"), (h, w, t, None), "scale.sum"),
             (lambda x, t: F.cross_entropy(f32(x).view(-1, V), t, label_smoothing=0.1), (x, t), None)]
    for fn, args, pattern in cases:
        leaves = [a.clone().requires_grad_() if a is not None and a.is_floating_point() else a for a in args]
        kept = [a.detach().clone() if a is not None else None for a in leaves]
        torch._dynamo.reset()
        mojo_compile.reset_report()
        compile_mojo(fn, target)(*leaves).backward()
        assert sites() == (fused(pattern) if pattern else MEAN)
        for a, k in zip(leaves, kept):
            assert a is None or torch.equal(a.detach(), k)


# ------------------------------------------------------------------------------------------- dynamic shapes
HEADS_SIDE_BY_SIDE = 2  # multi-token (Medusa) heads: [B, T, 2 * V] logits, one label per head and position


def _heads_loss(x, t):
    return F.cross_entropy(f32(x).view(-1, V), t)


def _heads_lm_head_loss(h, w, t):
    return F.cross_entropy(f32(F.linear(h, w)).view(-1, V), t)


@pytest.mark.parametrize("case", ["logits_bf16", "logits_fp32", "lm_head", "one_view_per_row"])
def test_loss_under_dynamic_shapes(case):
    """dynamic=True: a loss on another view of the logits than [N, V] (heads side by side, [B, T, 2V] viewed as
    [-1, V]) compiles and gives eager's numbers -- with a symbolic class dim the flattening form's re-trace can
    prove neither that its rows match the labels nor that they do not, and it used to reach cross_entropy's
    batch-size check, whose ValueError failed the compile. The ordinary [B, T, V] -> [-1, V] loss still fuses."""
    n = 2 * 5 * HEADS_SIDE_BY_SIDE
    t = labels(n)
    if case == "lm_head":
        fn = _heads_lm_head_loss
        args, wrt = [torch.randn(2, 5, H, device=DEVICE).to(BF16),
                     torch.randn(HEADS_SIDE_BY_SIDE * V, H, device=DEVICE).to(BF16), t], (0, 1)
    elif case == "one_view_per_row":
        fn, args, wrt = _heads_loss, [logits(2, 5, V), labels(10)], (0,)  # one head: HF's flat loss
    else:
        x = logits(2, 5, HEADS_SIDE_BY_SIDE * V, dtype=BF16 if case == "logits_bf16" else FP32)
        fn, args, wrt = _heads_loss, [x, t], (0,)
    mojo_compile.reset_report()
    compiled = torch.compile(fn, backend="mojo", options={"inner_compiler": "eager"}, dynamic=True)
    grad = torch.randn((), device=DEVICE)
    got = forward_backward(compiled, args, wrt, grad)
    if case == "one_view_per_row":
        assert sites() == MEAN
    eager = forward_backward(fn, args, wrt, grad)
    exact = forward_backward(fn, as_fp64(args), wrt, grad.double())
    for i, (mine, ref, ref64) in enumerate(zip([got[0], *got[1]], [eager[0], *eager[1]], [exact[0], *exact[1]])):
        assert mine.shape == ref.shape and mine.dtype == ref.dtype, i
        check_as_accurate(mine, ref, ref64, FP32 if i == 0 else mine.dtype, f"output {i}")
