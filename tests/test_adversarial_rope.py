"""RoPE near-misses: a learnable rotary table (the op gives cos / sin no gradient), so it must stay eager's, with
eager's gradient. Torch target and ttx (the interpreter on the CPU)."""
import pytest
import torch

import mojo_compile
from conftest import DEVICE, WITH_INDUCTOR, mojo_options
from test_adversarial_kwargs import rope_alpha

TARGETS = WITH_INDUCTOR  # both classes also through Inductor


class LearnedRotary(torch.nn.Module):
    """A learnable rotary table: the RoPE op gives cos / sin no gradient, so this must stay eager's."""

    def __init__(self):
        super().__init__()
        self.cos = torch.nn.Parameter(torch.randn(1, 5, 16))
        self.sin = torch.nn.Parameter(torch.randn(1, 5, 16))

    def forward(self, q, k):
        return rope_alpha(1)(q, k, self.cos, self.sin)


@pytest.mark.parametrize("target", TARGETS)
def test_learnable_rotary_table_keeps_its_gradient(target):
    module = LearnedRotary().to(DEVICE)
    q, k = torch.randn(2, 4, 5, 16, device=DEVICE), torch.randn(2, 2, 5, 16, device=DEVICE)
    out = torch.compile(module, backend="mojo", options=mojo_options(target))(q, k)
    assert "mojo.rope" not in mojo_compile.last_report().counts()
    (out[0].sum() + out[1].square().sum()).backward()
    got = module.cos.grad.clone()
    module.cos.grad = None
    ref = module(q, k)
    (ref[0].sum() + ref[1].square().sum()).backward()
    torch.testing.assert_close(got, module.cos.grad)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class QRotatedBeforeKProjected(torch.nn.Module):
    """q is rotated before k is projected: the one op for both must be placed after k's producer."""

    def __init__(self, partial):
        super().__init__()
        self.pq, self.pk, self.partial = torch.nn.Linear(64, 64), torch.nn.Linear(64, 32), partial

    def rope(self, x, c, s):
        if not self.partial:
            return x * c + rotate_half(x) * s
        rot = c.shape[-1]
        x_pass, x_rot = x[..., rot:], x[..., :rot]  # the pass-through part taken first
        return torch.cat([x_rot * c + rotate_half(x_rot) * s, x_pass], dim=-1)

    def forward(self, x, cos, sin):
        c, s = cos.unsqueeze(1), sin.unsqueeze(1)
        q = self.rope(self.pq(x).view(2, 5, 4, 16).transpose(1, 2), c, s)
        k = self.rope(self.pk(x).view(2, 5, 2, 16).transpose(1, 2), c, s)
        return q, k


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("partial", [False, True])
def test_rope_of_q_written_before_k_is_projected(partial, target):
    module = QRotatedBeforeKProjected(partial).to(DEVICE)
    rot = 8 if partial else 16
    x = torch.randn(2, 5, 64, device=DEVICE)
    cos, sin = torch.randn(2, 5, rot, device=DEVICE), torch.randn(2, 5, rot, device=DEVICE)
    got = torch.compile(module, backend="mojo", options=mojo_options(target))(x, cos, sin)
    assert mojo_compile.last_report().counts() == {"mojo.rope": 1}
    for g, e in zip(got, module(x, cos, sin)):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)  # fp32 either way; the kernel may round in one step
