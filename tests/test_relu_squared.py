"""The out-of-tree example fusion (examples/relu_squared_fusion.py: squared ReLU, declared end to end with the public
API, its own Triton kernel): fused where models spell it, eager's numbers (bitwise on the torch target, as accurate
as eager against fp64 on ttx), gradients included, NaN kept, an input the kernel cannot take left to the torch
reference with a logged reason. And the API it uses: `register_impl` before and after a target's table loads, twice
is an error; fusions found through the entry-point group, a broken one logged and skipped."""
import importlib.metadata
import logging
import os
import sys

import pytest
import torch
import torch.nn.functional as F

import mojo_compile
from conftest import DEVICE, TARGETS, mojo_options
from mojo_compile import lowering, patterns
from test_cross_entropy import check_as_accurate

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


@pytest.fixture(scope="module")
def fusion():
    """The example imported (its registrations run once per process); its pattern removed again afterwards, so
    that the other test files see the built-ins alone."""
    sys.path.insert(0, EXAMPLES)
    try:
        import relu_squared_fusion
    finally:
        sys.path.remove(EXAMPLES)
    if "relu_squared" not in {p.name for p in mojo_compile.registered_patterns()}:  # removed by an earlier module
        mojo_compile.register_pattern("relu_squared", relu_squared_fusion._search, relu_squared_fusion._replace,
                                      [(torch.randn(8, 16),)], family="relu_squared")
    yield relu_squared_fusion
    mojo_compile.unregister_pattern("relu_squared")


SPELLINGS = {
    "pow": lambda h: F.relu(h) ** 2,
    "square": lambda h: torch.relu(h).square(),
    "product": lambda h: (lambda r: r * r)(F.relu(h)),
}


def mlp(spelling):
    def fn(x, w_up, w_down):
        return SPELLINGS[spelling](x @ w_up) @ w_down
    return fn


def run(fn, *args):
    args = [a.detach().clone().requires_grad_() for a in args]
    out = fn(*args)
    out.backward(torch.ones_like(out))
    return out.detach(), [a.grad for a in args]


@pytest.mark.parametrize("target", TARGETS + ["torch+inductor"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_fused_and_as_accurate_as_eager(fusion, target, dtype, spelling):
    if target == "torch+inductor" and (dtype != torch.float32 or spelling != "pow"):
        pytest.skip("Inductor on the CPU is slow: one case")
    x = torch.randn(3, 7, 32, device=DEVICE).to(dtype)
    w_up = (torch.randn(32, 96, device=DEVICE) / 4).to(dtype)
    w_down = (torch.randn(96, 32, device=DEVICE) / 8).to(dtype)
    fn = mlp(spelling)
    out, grads = run(torch.compile(fn, backend="mojo", options=mojo_options(target)), x, w_up, w_down)
    sites = [(s.pattern, s.op, s.target) for s in mojo_compile.last_report().sites]
    assert sites == [("relu_squared", "mojo.relu_squared", target.partition("+")[0])], sites
    eager = run(fn, x, w_up, w_down)
    if target.startswith("torch"):  # eager's ops: eager's numbers (Inductor's fp32 codegen of the same math too)
        assert torch.equal(out, eager[0]) and all(torch.equal(g, e) for g, e in zip(grads, eager[1]))
        return
    exact = run(fn, x.double(), w_up.double(), w_down.double())
    check_as_accurate(out, eager[0], exact[0], dtype, "out")
    for name, g, e, t in zip(("x", "w_up", "w_down"), grads, eager[1], exact[1]):
        check_as_accurate(g, e, t, dtype, name)


@pytest.mark.parametrize("target", TARGETS)
def test_nan_and_negative_zero_as_eager(fusion, target):
    x = torch.tensor([[float("nan"), -0.0, 0.0, -2.0, 3.0, float("inf"), -float("inf"), 0.5]], device=DEVICE)
    out, (dx,) = run(lambda t: torch.ops.mojo.relu_squared(t, target=target), x)
    ref, (ref_dx,) = run(lambda t: F.relu(t) ** 2, x)
    assert torch.equal(out.isnan(), ref.isnan()) and torch.equal(out.nan_to_num(), ref.nan_to_num())
    assert torch.equal(dx.isnan(), ref_dx.isnan()) and torch.equal(dx.nan_to_num(), ref_dx.nan_to_num())


@pytest.mark.skipif(len(TARGETS) < 2, reason="needs the ttx target")
def test_an_input_the_kernel_cannot_take_falls_back(fusion, caplog):
    x = torch.randn(16, 8, device=DEVICE).t()  # not contiguous
    lowering._LOGGED.clear()
    with caplog.at_level(logging.WARNING, logger="mojo_compile"):
        out = torch.ops.mojo.relu_squared(x, target="ttx")
    assert torch.equal(out, F.relu(x) ** 2)
    assert "relu_squared: ttx falls back to torch: inputs of different shapes" in caplog.text


def test_opcheck(fusion):
    x = torch.randn(5, 12, device=DEVICE, requires_grad=True)
    for target in TARGETS:
        torch.library.opcheck(torch.ops.mojo.relu_squared.default, (x, target))


# ----------------------------------------------------------------------------------------------------------- the API
@pytest.fixture
def planted_target():
    yield "planted"
    lowering._LOADERS.pop("planted", None)
    lowering._TABLES.pop("planted", None)
    lowering._PENDING.pop("planted", None)


def test_register_impl_before_and_after_the_table_loads(planted_target):
    def fn(x):
        return x

    lowering.register_target(planted_target, lambda: {"loaded_op": lowering.Impl(fn)})
    lowering.register_impl("early_op", planted_target, fn)  # before the table loads: kept, then added
    assert lowering._table(planted_target).keys() == {"loaded_op", "early_op"}
    lowering.register_impl("late_op", planted_target, fn)  # after: added at once
    assert lowering._table(planted_target)["late_op"].fn is fn
    for op in ("loaded_op", "early_op", "late_op"):
        with pytest.raises(ValueError, match="implemented twice"):
            lowering.register_impl(op, planted_target, fn)


def test_a_table_loading_with_an_op_registered_twice_is_an_error(planted_target):
    lowering.register_target(planted_target, lambda: {"op": lowering.Impl(lambda x: x)})
    lowering.register_impl("op", planted_target, lambda x: x)
    with pytest.raises(ValueError, match="implemented twice"):
        lowering._table(planted_target)


class _EntryPoint:
    def __init__(self, name, loaded):
        self.name, self._loaded = name, loaded

    def load(self):
        if isinstance(self._loaded, Exception):
            raise self._loaded
        return self._loaded


def test_fusions_found_through_the_entry_point_group(monkeypatch, caplog):
    """Each entry point of "mojo_compile.fusions" is loaded (a callable is called) after the built-ins; one that
    fails is logged and skipped."""
    called = []
    points = [_EntryPoint("broken", ImportError("no module named mypkg")),
              _EntryPoint("good", lambda: called.append("registered"))]
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group=None: points if group == patterns.ENTRY_POINT_GROUP else [])
    monkeypatch.setattr(patterns, "_ENTRY_POINTS_LOADED", False)  # (loaded once per process: again here)
    with caplog.at_level(logging.WARNING, logger="mojo_compile"):
        patterns._load_entry_points()
    assert called == ["registered"]
    assert "the fusion 'broken' (entry point of mojo_compile.fusions) failed to load" in caplog.text


def test_builtin_families_are_found_without_a_list():
    """Every built-in family's module is found by name (patterns/, ops/): adding one is adding its module."""
    assert {"add_rms_norm", "rms_norm", "gated_act", "rope", "attention", "cross_entropy",
            "linear_cross_entropy"} <= set(patterns.BUILTIN_MODULES)
    families = {p.family for p in mojo_compile.registered_patterns()}
    assert {"rms_norm", "gated_act", "rope", "attention", "cross_entropy", "linear_cross_entropy"} <= families


def test_an_entry_point_registering_patterns_is_called_once(monkeypatch, caplog):
    """A fusion function registering its patterns while the built-ins load (register_pattern loads them first):
    called once, no warning."""
    calls = []

    def register():
        calls.append(1)
        mojo_compile.register_pattern("ep.relu_cubed", lambda x: F.relu(x) ** 3, lambda x: F.relu(x) ** 3,
                                      [(torch.randn(8, 16),)], family="ep")

    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group=None: [_EntryPoint("ep", register)] if group == patterns.ENTRY_POINT_GROUP else [])
    monkeypatch.setattr(patterns, "_ENTRY_POINTS_LOADED", False)
    patterns._load_builtins.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="mojo_compile"):
            patterns.load_fusions()
        assert calls == [1] and "failed to load" not in caplog.text
    finally:
        mojo_compile.unregister_pattern("ep.relu_cubed")


def test_a_canonicalisation_rule_added_later_retraces_the_patterns():
    """A rule registered after patterns were traced applies to their traces too: they still match what the rule
    makes of the model's graph (here silu spelled out as x * sigmoid(x), under a gated MLP's pattern)."""
    from mojo_compile import canonicalize

    def gated(g, u):
        return F.silu(g) * u

    g, u = torch.randn(4, 32, device=DEVICE), torch.randn(4, 32, device=DEVICE)
    options = mojo_options("torch")

    def spelled_out(node):
        with node.graph.inserting_before(node):
            sig = node.graph.call_function(torch.ops.aten.sigmoid.default, (node.args[0],))
            return node.graph.call_function(torch.ops.aten.mul.Tensor, (node.args[0], sig))

    torch.compile(gated, backend="mojo", options=options)(g, u)
    assert [s.op for s in mojo_compile.last_report().sites] == ["mojo.gated_act"]
    canonicalize.register_rule(torch.ops.aten.silu.default, spelled_out)
    try:
        torch._dynamo.reset()
        mojo_compile.reset_report()
        out = torch.compile(gated, backend="mojo", options=options)(g, u)
        assert [s.op for s in mojo_compile.last_report().sites] == ["mojo.gated_act"]
        assert torch.equal(out, gated(g, u))
    finally:
        canonicalize.RULES.pop(torch.ops.aten.silu.default)
        patterns.forget_traces()
