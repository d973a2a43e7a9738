"""Norm and gated-MLP near-misses found by an adversarial review: fp64 inputs and weights (the ops compute in
fp32), strided inputs whose results eager lays out as the input (the ops' outputs are contiguous), and a residual add
+ norm where only the sum carries a gradient. Each case gives eager's numbers, layouts and gradients (None where
eager's is None), fused or not; the checks that refuse them are patterns.layout_reason, weight_only_grad_reason and
the norms' dtype checks. Torch target (bit for bit) and ttx (the interpreter on the CPU), eager inner compiler.
"""
import pytest
import torch
import torch.nn.functional as F

import mojo_compile
from conftest import DEVICE, TARGETS, mojo_options

H = 64


def compiled(fn, target, dynamic=False):
    return torch.compile(fn, backend="mojo", dynamic=dynamic, options=mojo_options(target))


def counts():
    return mojo_compile.last_report().counts()


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, device=DEVICE).to(dtype)


def weight(n=H, dtype=torch.float32):
    return (1 + 0.3 * torch.randn(n, device=DEVICE)).to(dtype)


def llama_norm(h, w, eps=1e-6):  # hf-spellings N1: the cast back before the weight multiply ("normed")
    h32 = h.float()
    return w * (h32 * torch.rsqrt(h32.pow(2).mean(-1, keepdim=True) + eps)).to(h.dtype)


# ------------------------------------------------------------------------------------------------------------------
# 1. An fp64 weight beside an fp32 / bf16 x in the Llama spelling: eager multiplies in fp64 (type promotion), the op
#    truncates the weight to fp32 (lowering/reference.normalise: `y.float() * weight.float()`). rms_norm and
#    add_rms_norm alike; _norm_check accepts any float weight.
def llama_with_residual(x, r, w):
    h = x + r
    return llama_norm(h, w), h


@pytest.mark.parametrize("form", ["rms_norm", "add_rms_norm"])
@pytest.mark.parametrize("x_dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_fp64_weight_in_the_llama_spelling_is_multiplied_in_fp64(form, x_dtype):
    x, r = randn(4, 5, H, dtype=x_dtype), randn(4, 5, H, dtype=x_dtype)
    w = weight(dtype=torch.float64)
    if form == "rms_norm":
        fn, args = llama_norm, (x, w)
    else:
        fn, args = llama_with_residual, (x, r, w)
    got = compiled(fn, "torch")(*args)
    want = fn(*args)
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    for g, e in zip(got, want):
        assert g.dtype == e.dtype
        assert torch.equal(g, e), f"{counts()}: max abs error {(g - e).abs().max().item():.3g}"


# ------------------------------------------------------------------------------------------------------------------
# 2. F.rms_norm / nn.RMSNorm on an fp64 input: eager computes in fp64, the op in fp32 (normalise upcasts with
#    x.float()). rms_norm.F_rms_norm's check (_norm_check) accepts any float x; layer_norm refuses fp64.
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("form", ["F.rms_norm", "F.rms_norm unweighted", "nn.RMSNorm"])
def test_fp64_rms_norm_stays_fp64(form, target):
    x = randn(4, 5, H, dtype=torch.float64)
    if form == "F.rms_norm":
        w = weight(dtype=torch.float64)
        fn, args = (lambda x, w: F.rms_norm(x, (H,), w, 1e-6)), (x, w)
    elif form == "F.rms_norm unweighted":
        fn, args = (lambda x: F.rms_norm(x, (H,), None, 1e-6)), (x,)
    else:
        module = torch.nn.RMSNorm(H, eps=1e-6).to(DEVICE, torch.float64)
        with torch.no_grad():
            module.weight.copy_(weight(dtype=torch.float64))
        fn, args = module, (x,)
    got = compiled(fn, target)(*args)
    want = fn(*args)
    # eager is fp64 throughout: 1e-12 is far above its rounding, far below fp32's (the bug gives ~3e-7)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, msg=lambda m: f"{counts()}: {m}")


# ------------------------------------------------------------------------------------------------------------------
# 3. The fused outputs are always contiguous (the references end in .contiguous(), the kernels allocate contiguous),
#    where eager's elementwise result keeps the layout of a strided input. Code that views the result the way its
#    eager layout allows (`y.transpose(0, 2).view(-1)`: a sequence-first model handing back batch-first) raises.
def rms_norm_of_strided(x, r, w):
    return llama_norm(x.transpose(0, 2), w).transpose(0, 2).view(-1)


def add_rms_norm_sum_of_strided(x, r, w):
    h = x.transpose(0, 2) + r.transpose(0, 2)
    return llama_norm(h, w), h.transpose(0, 2).view(-1)


def gated_act_of_strided(x, r, w):
    return (F.silu(x.transpose(0, 2)) * r.transpose(0, 2)).transpose(0, 2).view(-1)


def gated_act_fused_of_strided(x, r, w):
    gate, up = torch.cat([x, r], 0).transpose(0, 2).chunk(2, -1)
    return (F.silu(gate) * up).transpose(0, 2).view(-1)


def add_layer_norm_sum_of_strided(x, r, w):
    h = x.transpose(0, 2) + r.transpose(0, 2)
    return F.layer_norm(h, (h.shape[-1],), w, None, 1e-5), h.transpose(0, 2).view(-1)


LAYOUT_CASES = {  # name -> (fn, the op it fused into, targets where it raised)
    "rms_norm": (rms_norm_of_strided, "mojo.rms_norm", TARGETS),
    "add_rms_norm sum": (add_rms_norm_sum_of_strided, "mojo.add_rms_norm", TARGETS),
    "gated_act": (gated_act_of_strided, "mojo.gated_act", TARGETS),
    "gated_act_fused": (gated_act_fused_of_strided, "mojo.gated_act_fused", TARGETS),
    "add_layer_norm sum": (add_layer_norm_sum_of_strided, "mojo.add_layer_norm", [t for t in TARGETS if t != "torch"]),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name,target", [(n, t) for n, (_, _, ts) in LAYOUT_CASES.items() for t in ts])
def test_result_viewed_as_eagers_strided_layout(name, target, dtype):
    fn, op, _ = LAYOUT_CASES[name]
    x, r = randn(H, 3, 2, dtype=dtype), randn(H, 3, 2, dtype=dtype)  # transposed to [2, 3, H]: rows strided by 6
    w = weight(H, dtype=dtype)
    want = fn(x, r, w)  # eager: the view is valid
    got = compiled(fn, target)(x, r, w)  # raised "view size is not compatible" when fused
    assert op in counts(), counts()  # (the view of eager's layout becomes a reshape: backend.relayout_views)
    for g, e in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        assert g.stride() == e.stride()
        if target == "torch":
            torch.testing.assert_close(g, e, rtol=0, atol=0)
        else:  # ttx's kernels for what still fuses (a contiguous layer_norm) sum in another order than eager's
            torch.testing.assert_close(g, e)  # (the dtype's default resolution)


def norm_then_projection(x, w, proj):
    return F.linear(F.rms_norm(x, (H,), w, 1e-6), proj).transpose(0, 1).reshape(-1)


@pytest.mark.parametrize("target", TARGETS)
def test_layouts_of_a_dynamic_shape_graph_propagate_through_composite_ops(target):
    """dynamic=True: backend.relayout_views propagates symbolic fake values through the rewritten graph, composite
    ops included (aten.linear: torch 2.11's C++ matmul asks a symbolic tensor for its numel() unless the Python
    dispatcher runs its symbolic decomposition). Was: every dynamic-shape graph with a linear left unrewritten."""
    fn = compiled(norm_then_projection, target, dynamic=True)
    w, proj = weight(), randn(5, H)
    for rows in (3, 7):
        x = randn(2, rows, H)
        torch.testing.assert_close(fn(x, w, proj), norm_then_projection(x, w, proj))
        assert counts().get("mojo.rms_norm") == 1, mojo_compile.last_report().graphs[-1].notes


class ScaledHead(torch.nn.Module):
    """Granite's spelling: the logits divided by a float attribute (`logits_scaling`), after the final norm."""

    def __init__(self):
        super().__init__()
        self.norm, self.head, self.logits_scaling = torch.nn.RMSNorm(H, eps=1e-6), torch.nn.Linear(H, 5), 4.0

    def forward(self, x):
        return self.head(self.norm(x)) / self.logits_scaling


@pytest.mark.parametrize("target", TARGETS + ["torch+inductor"])
def test_a_float_attribute_under_dynamic_shapes_leaves_the_graph_rewritable(target):
    """dynamic=True makes a float attribute a graph input read by `.item()`: relayout_views' fake propagation has no
    value for it and takes the trace's symbol. Was: every graph with such a float (Granite's multipliers) left
    unrewritten ("DataDependentOutputException: aten._local_scalar_dense")."""
    model = ScaledHead().to(DEVICE)
    fn = compiled(model, target, dynamic=True)
    for rows in (3, 5):
        x = randn(2, rows, H)
        torch.testing.assert_close(fn(x), model(x))
        graph = mojo_compile.last_report().graphs[-1]  # (Inductor may compile the frame twice)
        assert [s.op for s in graph.sites] == ["mojo.rms_norm"], graph.notes


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("scale", [0.5, 0.25])
def test_unweighted_bf16_norm_times_a_constant_compiles(scale, target):
    """`(x32 * rsqrt(mean(x32^2) + eps) * c).to(bf16)`, a norm scaled by a Python constant: the built-in
    rms_norm.gemma3n pattern binds its tensor `weight` to the float c, and Inductor re-traces the search function
    with it before any check can refuse; `weight.to(...)` raised AttributeError (Inductor takes only a
    RuntimeError for "no match") and the compile failed where eager runs. The re-trace's failure is a no-match
    now (patterns._Tracer.retrace)."""
    def fn(x):
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5) * scale).to(x.dtype)

    x = randn(3, 64, dtype=torch.bfloat16)
    got, want = compiled(fn, target)(x), fn(x)
    if target == "torch":
        assert torch.equal(got, want)
    else:  # (a kernel for what fuses rounds once where eager rounds per op: bf16's default resolution)
        torch.testing.assert_close(got, want)


# ------------------------------------------------------------------------------------------------------------------
# 4. The residual add + norm where only the sum carries a gradient (the normalised value is detached or only
#    compared: a stop-gradient feature, a mask): eager gives the norm's weight no gradient (None) and the sum
#    requires grad only if x or the residual does. The fused op's backward computes a zero weight gradient from the
#    zeros it substitutes for the missing grad_y (ops/*: `grad_y = torch.zeros_like(total)`), and the sum, an output
#    of an op that reads the weight, requires grad whenever the weight does. An optimizer then sees a zero gradient
#    where eager had None (AdamW applies weight decay and its moments to it; eager skips the parameter).
def add_rms_norm_detached(x, r, w):
    h = x + r
    return llama_norm(h, w).detach(), h


def add_rms_norm_mask(x, r, w):
    h = x + r
    return llama_norm(h, w) > 0, h


def add_layer_norm_detached(x, r, w):
    h = x + r
    return F.layer_norm(h, (H,), w, None, 1e-5).detach(), h


DETACHED = {"add_rms_norm, y.detach()": (add_rms_norm_detached, "mojo.add_rms_norm"),
            "add_rms_norm, y > 0": (add_rms_norm_mask, "mojo.add_rms_norm"),
            "add_layer_norm, y.detach()": (add_layer_norm_detached, "mojo.add_layer_norm")}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("x_grad", [True, False], ids=["x_grad", "weight_grad_only"])
@pytest.mark.parametrize("name", list(DETACHED))
def test_no_weight_gradient_where_the_norm_output_carries_none(name, x_grad, target):
    fn, op = DETACHED[name]
    x0, r0, w0 = randn(4, 5, H), randn(4, 5, H), weight()

    def build():
        return x0.clone().requires_grad_(x_grad), r0.clone(), w0.clone().requires_grad_()

    eager_args, compiled_args = build(), build()
    _, h_want = fn(*eager_args)
    _, h_got = compiled(fn, target)(*compiled_args)
    if x_grad:
        assert op in counts(), counts()  # (a weight alone wanting a gradient: refused, or only the core fuses)
    assert h_got.requires_grad == h_want.requires_grad, "the sum requires grad where eager's does not"
    if h_want.requires_grad:
        g = randn(4, 5, H)
        (h_want * g).sum().backward()
        (h_got * g).sum().backward()
        torch.testing.assert_close(compiled_args[0].grad, eager_args[0].grad)
    assert eager_args[2].grad is None
    assert compiled_args[2].grad is None, "the weight got a (zero) gradient where eager gives it none"


# ------------------------------------------------------------------------------------------------------------------
# 5. add_rms_norm on the torch target is not bit-exact with eager for strided inputs: add_reference makes the sum
#    contiguous before normalising it, so the fp32 mean of squares is summed in another order than eager's reduction
#    over the strided sum (the plain rms_norm reference reduces x as it is, and matches).
@pytest.mark.parametrize("dtype", [torch.float32], ids=["fp32"])
def test_add_rms_norm_of_strided_inputs_is_bit_exact_on_torch(dtype):
    def fn(x, r, w):
        h = x.transpose(0, 2) + r.transpose(0, 2)
        return llama_norm(h, w), h

    x, r, w = randn(H, 8, 4, dtype=dtype), randn(H, 8, 4, dtype=dtype), weight(H, dtype=dtype)
    got, want = compiled(fn, "torch")(x, r, w), fn(x, r, w)
    assert counts() == {"mojo.add_rms_norm": 1}
    assert torch.equal(got[1], want[1])
    assert torch.equal(got[0], want[0]), f"max abs error {(got[0] - want[0]).abs().max().item():.3g}"


def viewed_then_written(x, w):
    y = llama_norm(x.transpose(0, 2), w).transpose(0, 2)
    y.view(-1).mul_(2)  # eager: writes y through the view its layout allows
    return y


@pytest.mark.parametrize("target", TARGETS)
def test_a_view_of_eagers_layout_that_is_written_leaves_the_graph_unrewritten(target):
    """A reshape would copy where eager's view aliased, and the write would miss y: the graph stays as Dynamo gave
    it (backend.relayout_views), with eager's numbers."""
    x, w = randn(H, 3, 2), weight(H)
    want = viewed_then_written(x, w)
    got = compiled(viewed_then_written, target)(x, w)
    assert not counts(), counts()
    assert torch.equal(got, want)


# ------------------------------------------------------------------------------------- an empty hidden size
def _llama_rms(x, w):
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)


def _chunked_swiglu(gu):
    g, u = gu.chunk(2, dim=-1)
    return F.silu(g) * u


ZERO_WIDTH = {
    "rms_norm": (_llama_rms, lambda h: [randn(2, 7, h), weight(h)]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5),
                   lambda h: [randn(2, 7, h), weight(h), randn(h)]),
    "gated_act": (lambda g, u: F.silu(g) * u, lambda h: [randn(2, 7, h), randn(2, 7, h)]),
    "gated_act_fused": (_chunked_swiglu, lambda h: [randn(2, 7, 2 * h)]),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(ZERO_WIDTH))
def test_an_empty_last_dim_gives_eagers_empty_results(name, target):
    """Hidden 16, then 0 (Dynamo specialises 0: a static graph of its own). The row helpers flattened with
    reshape(-1, 0), which torch cannot infer for 0 elements: the ttx forwards and the torch rms_norm backward raised
    where eager returns empty outputs and gradients (kernels/common.py and lowering/reference.py: rows)."""
    fn, make = ZERO_WIDTH[name]
    cfn = compiled(fn, target)
    for h in (16, 0):
        args = [t.requires_grad_() for t in make(h)]
        out = cfn(*args)
        assert counts()["mojo." + name] >= 1
        want = fn(*args)
        torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)  # fp32: another summation order
        upstream = torch.randn_like(want)
        grads = torch.autograd.grad(out, args, upstream, allow_unused=True)
        wants = torch.autograd.grad(want, args, upstream, allow_unused=True)
        for g, w in zip(grads, wants):
            if w is not None:
                torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)  # fp32 weight sums over 14 rows, reordered


# ---------------------------------------------------------------------- a weight the model rounds itself
def _rstd(x32):
    return torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)


def _weight_rounded_right(x, w):
    x32 = x.float()
    return ((x32 * _rstd(x32)) * w.to(x.dtype)).to(x.dtype)


def _weight_rounded_left(x, w):
    x32 = x.float()
    return (w.to(x.dtype) * (x32 * _rstd(x32))).to(x.dtype)


def _offset_weight_rounded(x, w):
    x32 = x.float()
    return ((x32 * _rstd(x32)) * (1.0 + w.to(x.dtype))).to(x.dtype)


def _offset_weight_in_fp16(x, w):
    x32 = x.float()
    return ((x32 * _rstd(x32)) * (1.0 + w.half())).to(x.dtype)


def _add_then_weight_rounded(x, r, w):
    h = x + r
    return _weight_rounded_right(h, w), h


def _cohere_weight_rounded(x, w):
    h = x.to(torch.float32)
    mean = h.mean(-1, keepdim=True)
    h = (h - mean) * torch.rsqrt((h - mean).pow(2).mean(-1, keepdim=True) + 1e-5)
    return (w.to(x.dtype) * h).to(x.dtype)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("fn", [_weight_rounded_right, _weight_rounded_left, _offset_weight_rounded,
                                _offset_weight_in_fp16, _add_then_weight_rounded, _cohere_weight_rounded],
                         ids=lambda f: f.__name__.strip("_"))
def test_an_fp32_weight_the_model_rounds_is_read_rounded(fn, x_dtype, target):
    """`w.to(x.dtype)` (or `.half()`) of an fp32 master weight is not the patterns' `weight.to(torch.float32)`:
    Inductor's first match ignores dtype constants and bound weight to the fp32 w, its re-check (where that cast
    is a no-op) bound it to the cast's output, and the replacement multiplied by the unrounded w (up to 1 bf16 ulp
    off). Now a fusion reads the rounded weight: the torch target gives eager's bits, the kernels eager's accuracy
    against fp64 math that rounds the weight as eager does."""
    x, w = randn(8, H, dtype=x_dtype), weight()
    args = (x, randn(8, H, dtype=x_dtype), w) if fn is _add_then_weight_rounded else (x, w)
    got, want = compiled(fn, target)(*args), fn(*args)
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    rounded = [a.to(x_dtype).double() if a is w else a.double() for a in args]
    exact = fn(*rounded)
    exact = exact if isinstance(exact, tuple) else (exact,)
    for g, e, x64 in zip(got, want, exact):
        assert g.dtype == e.dtype
        if target == "torch" and fn is not _cohere_weight_rounded:  # the same roundings in the same order
            assert torch.equal(g, e), (counts(), (g.double() - e.double()).abs().max().item())
        else:  # another summation order: within eager's own error against the fp64 math, plus one output ulp
            ulp = torch.finfo(x_dtype).eps * x64.abs().clamp_min(1)
            assert ((g.double() - x64).abs() <= (e.double() - x64).abs() + ulp).all(), counts()
