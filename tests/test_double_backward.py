"""Second-order gradients (create_graph=True) through the fused norms, gated activation, attention and RoPE with
the eager inner compiler, where the compiled graph runs as an ordinary autograd program: a gradient penalty
`grads = autograd.grad(loss, (x, *params), create_graph=True)`, then `sum(g ** 2).backward()`. Each op's backward,
with grad mode on, differentiates its torch reference (ops/rms_norm.py `differentiable_grads`), as the losses'
`_differentiable_backward` does; the `mojo::*_backward` ops have no autograd formula (a double backward raised).
(aot_eager and Inductor refuse double backward outright: only the eager inner compiler is concerned.)

Fresh random inputs, batch 2; each second-order gradient (of x and of every parameter) is compared with eager's
and with an fp64 copy's. Tolerance: the compiled result may be at most twice as far from fp64 as eager's own fp32
result is, plus 1e-5 (fp32 resolution of a second derivative that sums over rows: the fused site recomputes in
its own order and eager's error can be near zero for a short sum).
"""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import mojo_compile
from conftest import DEVICE, TARGETS, mojo_options, rel

D, NH = 32, 4
HD = D // NH
B, S = 2, 5


class RMSNorm(nn.Module):
    """HF's Llama RMSNorm."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(d))
        self.eps = eps

    def forward(self, x):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rotate_half(x):
    return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)


def rotary(dtype):
    inv = 1.0 / (10000 ** (torch.arange(0, HD, 2, dtype=torch.float32, device=DEVICE) / HD))
    f = torch.outer(torch.arange(S, dtype=torch.float32, device=DEVICE), inv)
    e = torch.cat((f, f), -1)
    return e.cos().to(dtype)[None, None], e.sin().to(dtype)[None, None]  # [1, 1, S, HD]: heads first


def heads(t):
    return t.view(B, S, NH, HD).transpose(1, 2)


class Norm(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.n = nn.Linear(D, D), RMSNorm(D)

    def forward(self, x):
        return self.n(self.lin(x))


class AddNorm(nn.Module):
    """The residual add feeding the norm, the sum kept as the next residual."""

    def __init__(self):
        super().__init__()
        self.lin, self.n = nn.Linear(D, D), RMSNorm(D)

    def forward(self, x):
        h = x + self.lin(x)
        return self.n(h) * h


class LayerNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.n = nn.Linear(D, D), nn.LayerNorm(D)
        with torch.no_grad():  # not the identity affine
            self.n.weight.add_(0.1 * torch.randn(D))
            self.n.bias.add_(0.1 * torch.randn(D))

    def forward(self, x):
        return self.n(self.lin(x))


class AddLayerNorm(LayerNorm):
    def forward(self, x):
        h = x + self.lin(x)
        return self.n(h) * h


class SwiGLU(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate, self.up = nn.Linear(D, 2 * D, bias=False), nn.Linear(D, 2 * D, bias=False)

    def forward(self, x):
        return F.silu(self.gate(x)) * self.up(x)


class FusedGeGLU(nn.Module):
    """A fused gate_up projection split in halves (Phi3's spelling), gelu(tanh)."""

    def __init__(self):
        super().__init__()
        self.gate_up = nn.Linear(D, 4 * D, bias=False)

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, -1)
        return F.gelu(gate, approximate="tanh") * up


class Attention(nn.Module):
    """Causal SDPA; k is computed from q (the op's gradient of q is a partial derivative)."""

    def __init__(self):
        super().__init__()
        self.q, self.v = nn.Linear(D, D, bias=False), nn.Linear(D, D, bias=False)

    def forward(self, x):
        q = heads(self.q(x))
        y = F.scaled_dot_product_attention(q, q * 0.5 + 0.1, heads(self.v(x)), is_causal=True)
        return y.transpose(1, 2).reshape(B, S, D)


class MaskedAttention(Attention):
    """An additive float mask with -inf, one query row of the first batch masked whole (its output is 0)."""

    def __init__(self):
        super().__init__()
        allowed = torch.ones(B, 1, S, S, dtype=torch.bool).tril()
        allowed[0, :, 2] = False
        self.register_buffer("mask", torch.zeros(B, 1, S, S).masked_fill(~allowed, float("-inf")))

    def forward(self, x):
        q = heads(self.q(x))
        y = F.scaled_dot_product_attention(q, q * 0.5 + 0.1, heads(self.v(x)), attn_mask=self.mask.to(x.dtype))
        return y.transpose(1, 2).reshape(B, S, D)


class Rope(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k = nn.Linear(D, D, bias=False), nn.Linear(D, D, bias=False)

    def forward(self, x):
        q, k = heads(self.q(x)), heads(self.k(x))
        cos, sin = rotary(x.dtype)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        return q * k  # both outputs into the loss (nonlinearly)


class QKNormRope(Rope):
    """Qwen3: q_norm / k_norm over each head, then RoPE."""

    def __init__(self):
        super().__init__()
        self.qn, self.kn = RMSNorm(HD), RMSNorm(HD)

    def forward(self, x):
        q = self.qn(self.q(x).view(B, S, NH, HD)).transpose(1, 2)
        k = self.kn(self.k(x).view(B, S, NH, HD)).transpose(1, 2)
        cos, sin = rotary(x.dtype)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        return q * k


# name -> (module, the Mojo op the site must fuse to)
CASES = {
    "rms_norm": (Norm, "mojo.rms_norm"),
    "add_rms_norm": (AddNorm, "mojo.add_rms_norm"),
    "layer_norm": (LayerNorm, "mojo.layer_norm"),
    "add_layer_norm": (AddLayerNorm, "mojo.add_layer_norm"),
    "gated_act": (SwiGLU, "mojo.gated_act"),
    "gated_act_fused": (FusedGeGLU, "mojo.gated_act_fused"),
    "attention": (Attention, "mojo.attention"),
    "attention_masked_row": (MaskedAttention, "mojo.attention"),
    "rope": (Rope, "mojo.rope"),
    "qk_norm_rope": (QKNormRope, "mojo.qk_norm_rope"),
}


def _second_order(fn, module, inp, dtype):
    """x.grad and each parameter's .grad after the gradient penalty, None as zeros (eager leaves a parameter the
    penalty does not reach without one, the fused backward may give it zeros)."""
    x = inp.to(dtype).clone().requires_grad_()
    params = list(module.parameters())
    y = fn(x)
    w = torch.linspace(-1, 1, y.numel(), dtype=dtype, device=DEVICE).view_as(y)
    loss = (torch.tanh(y) * w).sum()  # nonlinear: the upstream gradient depends on y too
    grads = torch.autograd.grad(loss, [x, *params], create_graph=True)
    sum((g ** 2).sum() for g in grads).backward()
    return [t.grad.clone() if t.grad is not None else torch.zeros_like(t) for t in (x, *params)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", list(CASES))
def test_gradient_penalty_through_fused_op(case, target):
    make, op = CASES[case]
    torch.manual_seed(0)
    module = make().to(DEVICE)
    ref, exact = copy.deepcopy(module), copy.deepcopy(module).double()
    compiled = torch.compile(module, backend="mojo", options=mojo_options(target))
    torch.manual_seed(1)
    inp = torch.randn(B, S, D, device=DEVICE)
    got = _second_order(compiled, module, inp, torch.float32)
    assert op in [s.op for s in mojo_compile.last_report().sites], mojo_compile.last_report().sites
    with sdpa_kernel(SDPBackend.MATH):  # eager's CPU flash attention has no second derivative
        eager = _second_order(ref, ref, inp, torch.float32)
        fp64 = _second_order(exact, exact, inp, torch.float64)
    names = ["x", *(n for n, _ in module.named_parameters())]
    assert any(g.abs().sum() > 0 for g in got), "the penalty's gradients are all zero: nothing tested"
    for name, g, e, x in zip(names, got, eager, fp64):
        assert g.dtype == e.dtype and g.shape == e.shape, name
        eg, ee = rel(g, x), rel(e, x)
        assert eg <= 2 * ee + 1e-5, f"{case} {target}: {name}: error vs fp64 {eg:.3g}, eager's {ee:.3g}"


def test_first_order_path_unchanged():
    """Without create_graph the backward is the Mojo backward op, as before: its gradient needs no graph."""
    torch.manual_seed(0)
    module = Norm().to(DEVICE)
    compiled = torch.compile(module, backend="mojo", options=mojo_options("torch"))
    x = torch.randn(B, S, D, device=DEVICE, requires_grad=True)
    (g,) = torch.autograd.grad(compiled(x).sum(), x)
    assert g.grad_fn is None and not g.requires_grad
    (g2,) = torch.autograd.grad(compiled(x).sum(), x, create_graph=True)
    assert g2.requires_grad and rel(g2, g) < 1e-6
