"""Review s26 (the default Inductor inner compiler): each test is one confirmed finding and fails on the current
code, asserting the correct behaviour. Run:
    cd /work/main && MOJO_CACHE_DIR=/tmp/inductor_cache PYTHONPATH=tests:. timeout 600 .venv/bin/python -m pytest -q \
        -p no:cacheprovider -W ignore scratch/review_s26_inductor/test_findings.py
"""
import copy

import pytest
import torch
import torch.nn as nn

from conftest import DEVICE, rel

H = 16


class NormAndLinear(nn.Module):
    """An RMSNorm (fused: rms_norm) beside a linear: the smallest training graph with a Mojo op and parameters."""

    def __init__(self):
        super().__init__()
        self.norm = nn.RMSNorm(H, eps=1e-6)
        self.lin = nn.Linear(H, H)
        with torch.no_grad():
            self.norm.weight.add_(0.1 * torch.randn(H))

    def forward(self, x):
        return self.lin(x) + self.norm(x)


def _grads(run, model, x):
    y = run(x)
    weights = torch.linspace(-1, 1, y.numel(), dtype=y.dtype, device=y.device).view_as(y)
    (torch.tanh(y) * weights).sum().backward()
    return y, {name: p.grad for name, p in model.named_parameters()}


@pytest.mark.parametrize("disable", [[], ["rms_norm"]], ids=["fused", "nothing_fused"])
def test_cpp_wrapper_option_keeps_the_training_graph(disable):
    """options={"cpp_wrapper": True} (an Inductor option, forwarded): the compiled model must still be trained. Inductor
    takes a graph's inputs from its placeholders' meta["val"] under cpp_wrapper; make_fx's are detached
    snapshots, so AOTAutograd compiles an inference graph: the output does not require grad and every parameter of
    the compiled module silently gets no gradient. backend="inductor" with the same option trains."""
    torch.manual_seed(0)
    model = NormAndLinear().to(DEVICE)
    eager, exact = copy.deepcopy(model), copy.deepcopy(model).double()
    options = {"cpp_wrapper": True, "disable": disable} if disable else {"cpp_wrapper": True}
    compiled = torch.compile(model, backend="mojo", options=options)
    x = torch.randn(3, 5, H, device=DEVICE)
    y_got = compiled(x)
    assert y_got.requires_grad, "the compiled output does not require grad: the parameters will get no gradient"
    _, got = _grads(compiled, model, x)
    y_ref, ref = _grads(eager, eager, x)
    y_exact, want = _grads(exact, exact, x.double())
    assert rel(y_got, y_exact) <= 2 * rel(y_ref, y_exact) + 1e-6
    for name in want:
        assert got[name] is not None, f"{name}: no gradient"
        assert rel(got[name], want[name]) <= 2 * rel(ref[name], want[name]) + 1e-6, name


def test_cpp_wrapper_option_with_dynamic_shapes_runs():
    """options={"cpp_wrapper": True} with dynamic=True: the compiled function must run (backend="inductor" does). Under
    cpp_wrapper Inductor replaces each placeholder whose meta["val"] is not a tensor (the graph's SymInt sizes) by
    None and compiles on those: the wrapper then reads a size where it expects x ("expected ndim 3 but got 0"),
    whether or not anything fused."""
    torch.manual_seed(0)
    model = NormAndLinear().to(DEVICE)
    compiled = torch.compile(model, backend="mojo", options={"cpp_wrapper": True}, dynamic=True)
    with torch.no_grad():
        for tokens in (5, 7):
            x = torch.randn(2, tokens, H, device=DEVICE)
            y_got, y_ref = compiled(x), model(x)
            y_exact = copy.deepcopy(model).double()(x.double())
            assert rel(y_got, y_exact) <= 2 * rel(y_ref, y_exact) + 1e-6
