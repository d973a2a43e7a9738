"""Canonicalisation is exact: it never turns a fresh tensor into an alias of one that is written in place."""
import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICE, run_in_fresh_process


def compiled(fn):
    return torch.compile(fn, backend="mojo", options={"inner_compiler": "eager", "target": "torch"})


def test_identity_multiply_kept_when_its_input_is_mutated():
    def fn(x):
        y = x * 1.0
        x.add_(1.0)
        return y

    x = torch.randn(4, 8, device=DEVICE)
    expected = fn(x.clone())
    assert torch.equal(compiled(fn)(x), expected)


def test_identity_multiply_kept_when_its_result_is_mutated():
    def fn(x):
        y = (x * 1.0).view(32)
        y.mul_(3.0)
        return x + 0, y

    x = torch.randn(4, 8, device=DEVICE)
    before = x.clone()
    out = compiled(fn)(x)
    assert torch.equal(x, before)  # the user's tensor is untouched
    assert torch.equal(out[0], before) and torch.equal(out[1], before.view(32) * 3)


def _canonical_code(fn, *inputs):
    from mojo_compile import backend
    from mojo_compile.canonicalize import canonicalize

    captured = {}

    def capture(gm, example_inputs, **kw):
        aten_gm = backend.to_pre_dispatch_aten(gm, example_inputs)
        canonicalize(aten_gm)
        captured["code"] = aten_gm.code
        return aten_gm

    out = torch.compile(fn, backend=capture)(*inputs)
    torch.testing.assert_close(out, fn(*inputs), rtol=0, atol=0)  # exact, bit for bit
    return captured["code"]


def test_mean_unsqueezed_becomes_keepdim_through_scalar_pointwise_ops():
    x = torch.randn(3, 5, 16, device=DEVICE)
    code = _canonical_code(lambda x: torch.rsqrt(x.pow(2).mean(2) + 1e-5).unsqueeze(-1) * x, x)
    assert "unsqueeze" not in code and "aten.mean.dim(pow_1, [-1], True)" in code, code


def test_identity_multiply_dropped_without_mutation():
    code = _canonical_code(lambda x: (x * 1.0).to(x.dtype) + 2, torch.ones(3, device=DEVICE))
    assert "aten.mul" not in code and "aten.to" not in code


def test_mean_dtype_kwarg_survives_the_rewrite():
    x = torch.randn(3, 16, device=DEVICE)
    code = _canonical_code(lambda x: x.mean(-1, dtype=torch.float64).unsqueeze(-1), x)
    assert "unsqueeze" not in code and "dtype = torch.float64" in code, code


def test_unsqueeze_elsewhere_or_behind_a_tensor_operand_is_kept():
    x, y = torch.randn(3, 16, device=DEVICE), torch.randn(3, device=DEVICE)
    assert "unsqueeze" in _canonical_code(lambda x: x.mean(-1).unsqueeze(0), x)
    assert "unsqueeze" in _canonical_code(lambda x, y: (x.mean(-1) + y).unsqueeze(-1), x, y)
    assert "unsqueeze" in _canonical_code(lambda x: x.mean([0, 1]).unsqueeze(-1), x)


def test_grad_flag_reaches_a_submodule_parameter_read_by_get_attr():
    """needs_grad must see a learnable tensor whichever way the graph reads it, a dotted get_attr included."""
    from mojo_compile.patterns import mark_grad_inputs, needs_grad

    class Inner(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bias = torch.nn.Parameter(torch.randn(4))

    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            return x + self.inner.bias

    gm = torch.fx.symbolic_trace(Outer())
    attr = next(iter(gm.graph.find_nodes(op="get_attr")))
    assert attr.target == "inner.bias"
    mark_grad_inputs(gm, [torch.randn(4)])
    assert needs_grad(attr)


def _with_all_arguments(fn, op, *inputs):
    """fn traced to ATen, each `op` node rewritten by canonicalize.all_arguments: (the module, the `op` nodes)."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from mojo_compile.canonicalize import all_arguments

    gm = make_fx(fn)(*inputs)
    rewritten = []
    for node in list(gm.graph.find_nodes(op="call_function", target=op)):
        new = all_arguments(node)
        if new is None:  # already written out (every argument given): the call stays
            rewritten.append(node)
            continue
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
        rewritten.append(new)
    gm.graph.lint()
    gm.recompile()
    return gm, rewritten


@pytest.mark.parametrize("op, fn", [
    (torch.ops.aten.gelu.default, lambda x: torch.nn.functional.gelu(x) + 1),
    (torch.ops.aten.gelu.default, lambda x: torch.nn.functional.gelu(x, approximate="tanh") * 2),
    (torch.ops.aten.cumsum.default, lambda x: torch.cumsum(x, 1, dtype=torch.float64)),
    (torch.ops.aten.cumsum.default, lambda x: torch.cumsum(x, -1) - 1),
    (torch.ops.aten.sum.dim_IntList, lambda x: x.sum(-1, dtype=torch.float64)),
    (torch.ops.aten.sum.dim_IntList, lambda x: x.sum([0, 2], keepdim=True)),
    (torch.ops.aten.mean.dim, lambda x: x.mean(1, dtype=torch.float64)),
    (torch.ops.aten.mean.dim, lambda x: x.mean(-1)),
])
def test_all_arguments_keeps_keyword_only_arguments_keywords(op, fn):
    """all_arguments writes the positional arguments positionally and the keyword-only ones (given or defaulted) as
    keywords, so the rewritten call is one the op accepts and computes eager's values bit for bit."""
    from mojo_compile.canonicalize import all_arguments

    x = torch.randn(3, 5, 16, device=DEVICE)
    gm, rewritten = _with_all_arguments(fn, op, x)
    schema = op._schema
    keyword_only = {a.name for a in schema.arguments if a.kwarg_only}
    assert rewritten and keyword_only
    for node in rewritten:
        assert len(node.args) == len(schema.arguments) - len(keyword_only) and set(node.kwargs) == keyword_only
        assert all_arguments(node) is None  # written out: the rule leaves it
    fresh = torch.randn(3, 5, 16, device=DEVICE)
    torch.testing.assert_close(gm(fresh), fn(fresh), rtol=0, atol=0)


def test_all_arguments_rule_registered_for_gelu_compiles_to_eagers_values(tmp_path):
    """The documented `register_rule(op, all_arguments)` on an op with a keyword-only argument (gelu's approximate):
    the compiled function runs and gives eager's values. A fresh process (the rule set is process-wide) with a
    cache directory of its own."""
    body = """
        import conftest  # noqa: F401
        import torch, torch.nn.functional as F
        import mojo_compile
        from mojo_compile import canonicalize
        canonicalize.register_rule(torch.ops.aten.gelu.default, canonicalize.all_arguments)
        fn = torch.compile(lambda x: F.gelu(x) + 1, backend="mojo", options={"inner_compiler": "eager",
                                                                             "target": "torch"})
        fn(torch.randn(2, 5, 64))
        x = torch.randn(2, 5, 64)
        torch.testing.assert_close(fn(x), F.gelu(x) + 1, rtol=0, atol=0)
        print("OK")
    """
    assert run_in_fresh_process(body, cache_dir=tmp_path, timeout=300).split()[-1] == "OK"


@pytest.mark.parametrize("inner", ["eager", "inductor"])
def test_adding_zero_keeps_the_sign_of_zero(inner):
    """`-0.0 + 0` is +0.0 and `-0.0 - (-0.0)` is +0.0: neither `x + 0` nor `x - (-0.0)` is an identity on floats
    (1 / x, copysign and signbit see the sign), so both stay; `x + (-0.0)` and `x - 0` are identities."""
    import mojo_compile

    def fn(x):
        return 1.0 / (x + 0), 1.0 / (x - (-0.0)), torch.copysign(torch.ones_like(x), x + False), 1.0 / (x - 0)

    x = torch.tensor([-0.0, 1.0, -2.0], device=DEVICE)
    got = torch.compile(fn, backend="mojo", options={"inner_compiler": inner, "target": "torch"})(x)
    for g, e in zip(got, fn(x)):
        assert torch.equal(g, e) and torch.equal(torch.signbit(g), torch.signbit(e)), (g, e)
    assert not mojo_compile.last_report().sites


def test_transpose_dims_are_counted_from_the_start_smaller_first():
    """`k.transpose(-2, -1)`, `transpose(3, 2)` and `transpose(2, 3)` are one view: one spelling in the graph."""
    k = torch.randn(2, 3, 5, 8, device=DEVICE)
    for spelling in (lambda k: k.transpose(-2, -1) * 2, lambda k: k.transpose(3, 2) * 2,
                     lambda k: k.transpose(-1, 2) * 2):
        code = _canonical_code(spelling, k)
        assert "aten.transpose.int(arg0_1, 2, 3)" in code, code


def test_an_fp32_softmax_is_written_with_its_dtype():
    """`F.softmax(w, -1, dtype=torch.float32)` of an fp32 w, `F.softmax(w, dim=3)` and `w.softmax(-1)` are one
    computation; a softmax of bf16 scores keeps its form: without a dtype (probabilities rounded to bf16) or with
    fp32 (HF's eager attention)."""
    w = torch.randn(2, 3, 5, 5, device=DEVICE)
    for spelling in (lambda w: F.softmax(w, -1, dtype=torch.float32), lambda w: F.softmax(w, dim=3),
                     lambda w: w.softmax(-1)):
        code = _canonical_code(spelling, w)
        assert "aten.softmax.int(arg0_1, -1, torch.float32)" in code, code
    code = _canonical_code(lambda w: F.softmax(w, -1, dtype=torch.float32), w.bfloat16())
    assert "aten.softmax.int(arg0_1, -1, torch.float32)" in code, code
    code = _canonical_code(lambda w: F.softmax(w, -1), w.bfloat16())
    assert "aten.softmax.int(arg0_1, -1, None)" in code, code


@pytest.mark.parametrize("target", ["torch", "ttx"])
@pytest.mark.parametrize("masked", [False, True])
def test_hand_written_attention_fuses(target, masked):
    """nanoGPT's manual attention, `softmax((q @ k.transpose(-2, -1)) * (1 / sqrt(d)), dim=-1) @ v` in fp32, with an
    additive float mask or none, is the fp32 eager spelling of HF: it fuses, and is as accurate as eager against
    fp64 (within 2x eager's error + 1e-6: the op's online softmax sums in another order)."""
    import math

    import mojo_compile

    def attention(q, k, v, mask):
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        if masked:
            scores = scores + mask
        return F.softmax(scores, dim=-1) @ v

    q, k, v = (torch.randn(2, 4, 7, 16, device=DEVICE) for _ in range(3))
    mask = torch.randn(2, 1, 7, 7, device=DEVICE)
    torch._dynamo.reset()
    mojo_compile.reset_report()
    got = torch.compile(attention, backend="mojo", options={"inner_compiler": "eager", "target": target})(q, k, v,
                                                                                                          mask)
    assert [s.op for s in mojo_compile.last_report().sites] == ["mojo.attention"]
    reference = attention(*(t.double() for t in (q, k, v, mask)))
    eager_error = (attention(q, k, v, mask).double() - reference).abs().max()
    assert (got.double() - reference).abs().max() <= 2 * eager_error + 1e-6
