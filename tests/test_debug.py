"""mojo_compile.debug: verify, bisect and diff as an API. A subtly wrong user pattern (the tanh approximation of
GELU for the exact one; an RMSNorm replacement with a burned-in eps) must be named; a correct model must pass."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import mojo_compile
from mojo_compile import debug
from conftest import DEVICE, KERNEL_TARGET_OK, run_in_fresh_process

EAGER = {"inner_compiler": "eager", "target": "torch"}


class Block(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.norm = nn.RMSNorm(d, eps=1e-5)
        self.up, self.down = nn.Linear(d, 64), nn.Linear(64, d)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        return self.block(x)


@pytest.fixture
def wrong_gelu():
    mojo_compile.register_pattern("user.gelu_tanh", lambda x: F.gelu(x), lambda x: F.gelu(x, approximate="tanh"),
                                  (torch.randn(4, 8),), family="user_gelu", priority=50)
    yield "user.gelu_tanh"
    mojo_compile.unregister_pattern("user.gelu_tanh")


def gemma_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w)


@pytest.fixture
def burned_in_eps():
    """A Gemma-style norm replaced by the Mojo op with eps written in, not captured: right only for eps = 1e-6."""
    mojo_compile.register_pattern(
        "user.gemma_norm", gemma_norm,
        lambda x, w, eps: torch.ops.mojo.rms_norm(x, w, 1e-6, 1.0, "output")[0],
        (torch.randn(4, 8), torch.randn(8)), scalars={"eps": 0.0625}, family="user_norm", priority=50)
    yield "user.gemma_norm"
    mojo_compile.unregister_pattern("user.gemma_norm")


class GemmaNorm(nn.Module):
    def __init__(self, d=32, eps=1e-2):
        super().__init__()
        self.weight, self.eps = nn.Parameter(0.1 * torch.randn(d)), eps

    def forward(self, x):
        return gemma_norm(x, self.weight, self.eps)


class NormModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = GemmaNorm()
        self.proj = nn.Linear(32, 32)

    def forward(self, x):
        return self.proj(self.pre(x))


def test_verify_passes_a_correct_model_with_every_site_and_the_graph():
    model, x = Model().to(DEVICE), torch.randn(3, 5, 32, device=DEVICE)
    result = debug.verify(model, x, options=EAGER)
    assert result.ok, result.table()
    assert {(c.site, c.pattern) for c in result.checks} >= {("block.norm", "rms_norm.F_rms_norm"),
                                                            ("(graph)", "-")}
    assert "rule: err fp64 <= bound" in result.table()


def test_verify_under_the_default_inner_compiler():
    """Default options (the Inductor inner compiler) on a module: AOTAutograd's forward says `_boxed_call` but takes
    the inputs positionally, so the watch read the first input as the list of inputs and every graph check failed
    with "could not check". The fused site and the whole graph are checked and pass."""
    model, x = Model().to(DEVICE), torch.randn(3, 5, 32, device=DEVICE)
    result = debug.verify(model, x, options={"target": "torch"})
    assert result.ok, result.table()
    assert not result.notes, result.notes
    assert {(c.site, c.pattern) for c in result.checks} >= {("block.norm", "rms_norm.F_rms_norm"),
                                                            ("(graph)", "-")}


def test_verify_names_a_wrong_user_pattern_without_a_mojo_op(wrong_gelu):
    model, x = Model().to(DEVICE), torch.randn(3, 5, 32, device=DEVICE)
    result = debug.verify(model, x, options=EAGER)
    assert not result.ok
    bad = {(c.site, c.pattern) for c in result.failures}
    assert ("block", wrong_gelu) in bad and ("(graph)", "-") in bad, result.table()
    assert all(c.ok for c in result.checks if c.pattern == "rms_norm.F_rms_norm")  # the right site is not blamed


def test_verify_names_a_wrong_mojo_op_replacement_and_its_gradient(burned_in_eps):
    model, x = NormModel().to(DEVICE), torch.randn(3, 5, 32, device=DEVICE)
    result = debug.verify(model, x, grad=True, options=EAGER)
    bad = [c for c in result.failures if c.site != "(graph)"]
    assert bad and all(c.site == "pre" and c.pattern == burned_in_eps and c.op == "mojo.rms_norm" for c in bad)
    assert {c.what for c in bad} >= {"out 0"} and any(c.what.startswith("grad") for c in bad), result.table()


def test_verify_bf16_gradients_of_a_correct_model_pass():
    model = Model().to(DEVICE, torch.bfloat16)
    result = debug.verify(model, torch.randn(2, 7, 32, device=DEVICE, dtype=torch.bfloat16), grad=True,
                          options=EAGER)
    assert result.ok, result.table()
    assert any(c.what.startswith("grad") for c in result.checks)


@pytest.mark.skipif(not KERNEL_TARGET_OK, reason="needs a GPU or TRITON_INTERPRET=1")
def test_verify_on_ttx_kernels():
    model, x = Model().to(DEVICE), torch.randn(3, 5, 32, device=DEVICE)
    result = debug.verify(model, x, grad=True, options={"inner_compiler": "eager", "target": "ttx"})
    assert result.ok, result.table()
    assert any(c.target == "ttx" for c in result.checks)


def test_bisect_finds_the_wrong_pattern_then_its_site(wrong_gelu):
    model, x = Model().to(DEVICE), torch.randn(3, 5, 32, device=DEVICE)
    results = debug.bisect(model, x, options=EAGER)
    assert len(results) == 1 and results[0].differs and results[0].pattern == wrong_gelu
    assert [c.site for c in results[0].sites] == ["block"]
    assert "culprit pattern: user.gelu_tanh" in results[0].text()


def test_bisect_finds_nothing_in_a_correct_model():
    model, x = Model().to(DEVICE), torch.randn(3, 5, 32, device=DEVICE)
    assert debug.bisect(model, x, options=EAGER) == []


def test_diff_shows_the_rewrite_in_pre_dispatch_aten():
    model, x = Model().to(DEVICE), torch.randn(3, 5, 32, device=DEVICE)
    (text,) = debug.diff(model, x, options=EAGER)
    assert "-    rms_norm = torch.ops.aten.rms_norm.default" in text
    assert "+" in text and "torch.ops.mojo.rms_norm.default" in text


def test_watching_leaves_the_users_inputs_and_outputs_alone():
    """The checks run the graph on copies of what it writes in place (a cache); the user's call is unchanged."""
    def step(x, cache):
        cache.add_(1.0)
        return gemma_norm(x, torch.zeros(x.shape[-1], device=x.device), 1e-6) + cache

    x, cache = torch.randn(4, 16, device=DEVICE), torch.randn(4, 16, device=DEVICE)
    expected_cache = cache + 1.0
    expected = step(x, cache.clone())
    with debug.watching() as watcher:
        got = torch.compile(step, backend="mojo", options=EAGER)(x, cache)
    assert torch.equal(cache, expected_cache) and torch.equal(got, expected)
    checked = {(c.site, c.pattern) for c in watcher.verification.checks}
    assert {("(graph)", "-"), ("<root: step>", "rms_norm.gemma")} <= checked, checked  # the checks did run
    assert watcher.verification.ok, watcher.verification.table()


def _relu_scaled(x):
    return torch.relu(x) * 3.5


def _relu_scaled_to_inf(x):  # a wrong replacement: +inf where eager's result is 0
    return torch.where(x > 0, x * 3.5, torch.full_like(x, float("inf")))


@pytest.fixture
def infinite_pattern():
    mojo_compile.register_pattern("user.relu_to_inf", _relu_scaled, _relu_scaled_to_inf, [(torch.randn(8),)])
    yield
    mojo_compile.unregister_pattern("user.relu_to_inf")


def test_verify_flags_an_infinity_where_eager_is_finite(infinite_pattern):
    """A fused site that returns +inf where eager returns 0 is a FAIL: NaN and +-inf must sit where eager's do
    (the finite values were compared with every infinity zeroed on both sides, so inf vs 0 passed)."""
    x = torch.randn(16, device=DEVICE)
    verification = mojo_compile.verify(_relu_scaled, x, options={"inner_compiler": "eager", "target": "torch"})
    assert not verification.ok, verification.table()
    assert any("inf where eager" in c.note for c in verification.checks if not c.ok), verification.table()


# ---------------------------------------------------------------------------------- the elementwise rule of verify
def _sigmoid_times_3(x):
    return torch.sigmoid(x) * 3.0


def _last_element_negated(x):  # a wrong replacement: a kernel that gets the tail of the tensor wrong
    y = (torch.sigmoid(x) * 3.0).flatten()
    return torch.cat([y[:-1], -y[-1:]]).view(x.shape)


def _rounded_once(x):  # a correct replacement: fp32 inside, one rounding to x's dtype (eager rounds twice in bf16)
    return (torch.sigmoid(x.float()) * 3.0).to(x.dtype)


@pytest.fixture
def pattern_replaced_by(request):
    mojo_compile.register_pattern("user.sig3", _sigmoid_times_3, request.param, [(torch.randn(4, 8),)],
                                  family="user_sig3", priority=50)
    yield "user.sig3"
    mojo_compile.unregister_pattern("user.sig3")


@pytest.mark.parametrize("pattern_replaced_by", [_last_element_negated], indirect=True)
def test_verify_fails_one_wrong_element_among_131k_and_names_it(pattern_replaced_by):
    """One element of a bf16 [4, 128, 256] output with its sign flipped: the normwise error (1e-3) is under the
    normwise bound (7e-3), the elementwise rule fails it and names the element with its three values."""
    x = torch.randn(4, 128, 256, device=DEVICE, dtype=torch.bfloat16)
    x[3, 127, 255] = -2.0  # wrong by 2 x 0.36: under the normwise bound whatever the other elements are
    result = debug.verify(_sigmoid_times_3, x, options=EAGER)
    assert not result.ok, result.table()
    expected = _sigmoid_times_3(x)[3, 127, 255].item()  # eager's value at the wrong element
    for check in result.failures:
        assert check.err <= check.bound, result.table()  # the normwise rule alone would pass it
        assert check.elem > 1.0 and check.element.startswith("element (3, 127, 255): "), result.table()
        assert f"fused {-expected:.6g}, eager {expected:.6g}, fp64 " in check.element
        assert f"{check.graph} {check.site} out 0: {check.element} is " in result.table()
    assert {(c.site, c.pattern) for c in result.failures} == {("<root: _sigmoid_times_3>", "user.sig3"),
                                                              ("(graph)", "-")}, result.table()


@pytest.mark.parametrize("pattern_replaced_by", [_rounded_once], indirect=True)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_verify_passes_a_replacement_that_rounds_differently_from_eager(pattern_replaced_by, dtype):
    """Eager rounds sigmoid(x) to bf16 before the product, the replacement rounds once: elements differ from eager
    by an ulp, each within the elementwise rule (eager's own error at the element plus an ulp, times the factor)."""
    x = 4 * torch.randn(8, 64, 256, device=DEVICE, dtype=dtype)
    result = debug.verify(_sigmoid_times_3, x, options=EAGER)
    assert result.ok, result.table()
    site = [c for c in result.checks if c.pattern == pattern_replaced_by]
    assert site and all(0.0 <= c.elem <= 1.0 for c in result.checks)
    if dtype != torch.float32:
        assert site[0].max_abs > 0  # the replacement did round differently from eager
    assert "per element" in result.table()


# ---------------------------------------------------------------------------------- bisect over every rewrite
ISOLATED = """
import conftest  # noqa: F401
import torch
import mojo_compile
from mojo_compile import debug
OPT = {"inner_compiler": "eager", "target": "torch"}
"""


def _in_fresh_process(body: str) -> str:
    """A graph pass cannot be unregistered: a test that registers one runs in a process of its own."""
    import textwrap

    return run_in_fresh_process(ISOLATED + textwrap.dedent(body), timeout=300)


def test_bisect_blames_a_wrong_graph_pass_by_name():
    """A registered graph pass that turns sigmoid into tanh: bisect names it, after the patterns (which are correct),
    not "not a Mojo rewrite"."""
    out = _in_fresh_process("""
    aten = torch.ops.aten
    def sigmoid_to_tanh(gm):
        for n in gm.graph.nodes:
            if n.op == "call_function" and n.target == aten.sigmoid.default:
                n.target = aten.tanh.default
        return []
    mojo_compile.register_graph_pass("user.sigmoid_to_tanh", sigmoid_to_tanh)
    x = torch.randn(3, 16)
    compiled = torch.compile(lambda x: torch.sigmoid(x) + 1, backend="mojo", options=OPT)(x)
    assert torch.equal(compiled, torch.tanh(x) + 1)  # the pass is what runs
    (result,) = debug.bisect(lambda x: torch.sigmoid(x) + 1, x, options=OPT)
    print(result.text())
    print("culprit", repr(result.pattern))
    """)
    assert "culprit 'user.sigmoid_to_tanh'" in out and "not a Mojo rewrite" not in out, out


@pytest.fixture
def wrong_pattern_beside_one_named_like_its_family():
    """"user" (right) is named like its family; "user.tanh5" (wrong: + 1) is in that family and runs first."""
    mojo_compile.register_pattern("user", _sigmoid_times_3, _sigmoid_times_3, [(torch.randn(4, 8),)],
                                  family="user")
    mojo_compile.register_pattern("user.tanh5", lambda x: torch.tanh(x) * 5.0, lambda x: torch.tanh(x) * 5.0 + 1,
                                  [(torch.randn(4, 8),)], family="user", priority=5)
    yield "user.tanh5"
    mojo_compile.unregister_pattern("user.tanh5")
    mojo_compile.unregister_pattern("user")


def test_bisect_blames_the_wrong_pattern_not_the_one_named_like_its_family(
        wrong_pattern_beside_one_named_like_its_family):
    """Bisect disables each rewrite by its exact name: disabling "user" must not disable the family "user" too."""
    def model(x):
        return torch.sigmoid(x) * 3.0 + torch.tanh(x) * 5.0

    x = torch.randn(3, 16, device=DEVICE)
    (result,) = debug.bisect(model, x, options=EAGER)
    assert result.pattern == wrong_pattern_beside_one_named_like_its_family, result.text()
    assert [(c.pattern, c.ok) for c in result.sites] == [("user.tanh5", False)], result.text()


def test_verify_grad_passes_a_correct_norm_on_inputs_drawn_after_manual_seed_0():
    """x from `torch.manual_seed(0)`, nn.RMSNorm on the torch target (the reference: correct by construction), with
    gradients. The output gradients were drawn from seed 0 too, so they equalled x and the input gradient was
    rounding noise alone, which the elementwise rule judged against one noise sample of eager's: a false alarm."""
    torch.manual_seed(0)
    x = torch.randn(256, 512, requires_grad=True)
    result = debug.verify(nn.RMSNorm(512), x, grad=True, options=EAGER)
    assert result.ok, result.table()
