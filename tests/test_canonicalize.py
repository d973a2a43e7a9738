"""Canonicalisation is exact: it never turns a fresh tensor into an alias of one that is written in place."""
import torch

from conftest import DEVICE


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


def test_identity_multiply_dropped_without_mutation():
    from mojo_compile import backend
    from mojo_compile.canonicalize import canonicalize

    captured = {}

    def capture(gm, example_inputs, **kw):
        aten_gm = backend.to_pre_dispatch_aten(gm, example_inputs)
        canonicalize(aten_gm)
        captured["code"] = aten_gm.code
        return aten_gm

    out = torch.compile(lambda x: (x * 1.0).to(x.dtype) + 2, backend=capture)(torch.ones(3, device=DEVICE))
    assert torch.equal(out, torch.full((3,), 3.0, device=DEVICE))
    assert "aten.mul" not in captured["code"] and "aten.to" not in captured["code"]
