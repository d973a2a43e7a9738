"""torch.library.opcheck for every Mojo op (schema, fake impl, autograd registration, dynamic shapes), on each
target that can run here."""
import pytest
import torch

from conftest import DEVICE, KERNEL_TARGET_OK

mojo = torch.ops.mojo
TARGETS = ["torch"] + (["ttx"] if KERNEL_TARGET_OK else [])


def inputs(dtype=torch.bfloat16, shape=(3, 5, 40)):
    x = torch.randn(*shape, device=DEVICE, dtype=dtype, requires_grad=True)
    r = torch.randn(*shape, device=DEVICE, dtype=dtype, requires_grad=True)
    w = torch.randn(shape[-1], device=DEVICE, dtype=dtype, requires_grad=True)
    return x, r, w


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("cast", ["normed", "output", "rstd"])
def test_opcheck_rms_norm(target, cast):
    x, _, w = inputs()
    torch.library.opcheck(mojo.rms_norm.default, (x, w, 1e-6, 0.0, cast, target))
    torch.library.opcheck(mojo.rms_norm.default, (x, None, 1e-5, 0.0, cast, target))


@pytest.mark.parametrize("target", TARGETS)
def test_opcheck_add_rms_norm(target):
    x, r, w = inputs()
    torch.library.opcheck(mojo.add_rms_norm.default, (x, r, w, 1e-6, 1.0, "output", target))
    torch.library.opcheck(mojo.add_rms_norm.default, (x, r, None, 1e-6, 0.0, "normed", target))


@pytest.mark.parametrize("target", TARGETS)
def test_opcheck_backward(target):
    x, r, w = (t.detach() for t in inputs(torch.float32))
    rstd = torch.rand(3, 5, device=DEVICE) + 0.5
    torch.library.opcheck(mojo.rms_norm_backward.default, (torch.randn_like(x), x, w, rstd, None, 0.0, "normed", True,
                                                           target))
    torch.library.opcheck(mojo.rms_norm_backward.default, (torch.randn_like(x), x, None, rstd, r, 0.0, "output",
                                                           False, target))


def test_bad_arguments_are_clear_errors():
    x, r, w = inputs()
    with pytest.raises(ValueError, match="cast must be one of"):
        mojo.rms_norm(x, w, 1e-6, 0.0, "llama", "torch")
    with pytest.raises(ValueError, match="unknown mojo target 'cuda'"):
        mojo.rms_norm(x, w, 1e-6, 0.0, "normed", "cuda")
    with pytest.raises(ValueError, match="must match in shape and dtype"):
        mojo.add_rms_norm(x, r.float(), w, 1e-6, 0.0, "normed", "torch")


def test_unsupported_input_falls_back_to_torch_with_a_logged_reason(caplog):
    """float64 is not a Triton dtype here: the op runs the torch reference and says why, once."""
    from mojo_compile import lowering

    lowering._LOGGED.clear()
    x = torch.randn(4, 32, device=DEVICE, dtype=torch.float64)
    with caplog.at_level("WARNING", logger="mojo_compile"):
        y, _ = mojo.rms_norm(x, None, 1e-6, 0.0, "output", "ttx")
        mojo.rms_norm(x, None, 1e-6, 0.0, "output", "ttx")
    assert torch.equal(y, mojo.rms_norm(x, None, 1e-6, 0.0, "output", "torch")[0])
    messages = [r.getMessage() for r in caplog.records if "falls back to torch" in r.getMessage()]
    assert len(messages) == 1 and "float64" in messages[0], messages
