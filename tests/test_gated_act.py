"""Gated MLP activations (SwiGLU, GeGLU): every spelling matched with its exact count, equal to eager in values and
gradients; non-gated MLPs and broadcast products left alone; opcheck for each op."""
import pytest
import torch
import torch.nn.functional as F

import mojo_compile
from conftest import DEVICE, KERNEL_TARGET_OK, TARGETS

mojo = torch.ops.mojo
ACTS = {"silu": F.silu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "gelu": F.gelu}


class SeparateMLP(torch.nn.Module):  # M1: Llama / Gemma
    def __init__(self, act, up_first=False, hidden=32, inter=48):
        super().__init__()
        self.gate_proj = torch.nn.Linear(hidden, inter, bias=False)
        self.up_proj = torch.nn.Linear(hidden, inter, bias=False)
        self.down_proj = torch.nn.Linear(inter, hidden, bias=False)
        self.act, self.up_first = act, up_first

    def forward(self, x):
        gate, up = self.act(self.gate_proj(x)), self.up_proj(x)
        return self.down_proj(up * gate if self.up_first else gate * up)


class FusedMLP(torch.nn.Module):  # M2: Phi3 (gate first, up * act(gate)); moonshine (gate second)
    def __init__(self, act, gate_first=True, up_first=True, hidden=32, inter=48):
        super().__init__()
        self.gate_up_proj = torch.nn.Linear(hidden, 2 * inter, bias=False)
        self.down_proj = torch.nn.Linear(inter, hidden, bias=False)
        self.act, self.gate_first, self.up_first = act, gate_first, up_first

    def forward(self, x):
        first, second = self.gate_up_proj(x).chunk(2, dim=-1)
        gate, up = (first, second) if self.gate_first else (second, first)
        return self.down_proj(up * self.act(gate) if self.up_first else self.act(gate) * up)


def compile_and_compare(model, dtype, target="torch"):
    """Compiled (eager inner compiler) vs eager: forward and every gradient. On the torch target the op is the
    eager spelling, so equal bit for bit; on ttx the kernels reproduce eager's roundings (forward bit-exact, the
    backward within one rounding of the dtype)."""
    model = model.to(DEVICE, dtype)
    x = torch.randn(2, 7, 32, device=DEVICE, dtype=dtype, requires_grad=True)
    compiled = torch.compile(model, backend="mojo", options={"inner_compiler": "eager", "target": target})
    y = compiled(x)
    grads = torch.autograd.grad(y.float().square().sum(), [x, *model.parameters()])
    y_ref = model(x)
    grads_ref = torch.autograd.grad(y_ref.float().square().sum(), [x, *model.parameters()])
    assert torch.equal(y, y_ref)
    for g, g_ref in zip(grads, grads_ref):
        if target == "torch":
            assert torch.equal(g, g_ref)
        else:  # grad of the activation rounded once more or less than eager in a few elements
            torch.testing.assert_close(g, g_ref, rtol=2 ** -7, atol=1e-5)
    return [(s.pattern, s.op, s.target) for s in mojo_compile.last_report().sites]


@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("up_first", [False, True], ids=["act_first", "up_first"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_separate_projections(act, up_first, dtype):
    sites = compile_and_compare(SeparateMLP(ACTS[act], up_first), dtype)
    assert sites == [(f"gated_act.{act}" + (".up_first" if up_first else ""), "mojo.gated_act", "torch")]


@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("gate_first", [True, False], ids=["gate_first", "gate_second"])
@pytest.mark.parametrize("up_first", [False, True], ids=["act_first", "up_first"])
def test_fused_gate_up(act, gate_first, up_first):
    sites = compile_and_compare(FusedMLP(ACTS[act], gate_first, up_first), torch.bfloat16)
    name = f"gated_act_fused.{act}" + ("" if gate_first else ".gate_second") + (".up_first" if up_first else "")
    assert sites == [(name, "mojo.gated_act_fused", "torch")]


@pytest.mark.skipif(not KERNEL_TARGET_OK, reason="needs CUDA or TRITON_INTERPRET=1")
@pytest.mark.parametrize("model", [SeparateMLP(F.silu), FusedMLP(F.silu), FusedMLP(ACTS["gelu_tanh"], False)],
                         ids=["separate", "fused", "fused_gate_second"])
def test_ttx_target(model):
    sites = compile_and_compare(model, torch.bfloat16, "ttx")
    assert [s[2] for s in sites] == ["ttx"]


def test_non_gated_and_broadcast_products_stay():
    class NonGated(torch.nn.Module):  # M3: fc1 -> act -> fc2
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(32, 48), torch.nn.Linear(48, 32)

        def forward(self, x, scale):
            return self.fc2(F.silu(self.fc1(x))) + F.silu(x) * scale  # a broadcast product is no GLU

    model = NonGated().to(DEVICE)
    x, scale = torch.randn(2, 7, 32, device=DEVICE), torch.randn(32, device=DEVICE)
    y = torch.compile(model, backend="mojo", options={"inner_compiler": "eager"})(x, scale)
    assert mojo_compile.last_report().sites == []
    assert torch.equal(y, model(x, scale))


def test_odd_fused_width_with_a_slice_stays():
    """chunk(2) of an odd width gives unequal halves, which only multiply after a slice: the activation no longer
    feeds the product directly, so neither gated form matches."""
    def odd(gu):
        gate, up = gu.chunk(2, dim=-1)
        return F.silu(gate)[..., :-1] * up

    gu = torch.randn(3, 9, device=DEVICE)
    y = torch.compile(odd, backend="mojo", options={"inner_compiler": "eager"})(gu)
    assert torch.equal(y, odd(gu))
    assert mojo_compile.last_report().sites == []


@pytest.mark.parametrize("target", TARGETS)
def test_opcheck(target):
    g, u = (torch.randn(3, 5, 40, device=DEVICE, dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    gu = torch.randn(3, 5, 80, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    for act in ACTS:
        torch.library.opcheck(mojo.gated_act.default, (g, u, act, target))
        torch.library.opcheck(mojo.gated_act_fused.default, (gu, act, act != "gelu", target))
    dy = torch.randn(3, 5, 40, device=DEVICE, dtype=torch.bfloat16)
    torch.library.opcheck(mojo.gated_act_backward.default, (dy, g.detach(), u.detach(), "silu", target))
    torch.library.opcheck(mojo.gated_act_fused_backward.default, (dy, gu.detach(), "gelu_tanh", False, target))


def test_bad_arguments_are_clear_errors():
    g = torch.randn(3, 8)
    with pytest.raises(ValueError, match="act must be one of"):
        mojo.gated_act(g, g, "relu", "torch")
    with pytest.raises(ValueError, match="must match in shape and dtype"):
        mojo.gated_act(g, g[:, :4], "silu", "torch")
    with pytest.raises(ValueError, match="must be even"):
        mojo.gated_act_fused(torch.randn(3, 9), "silu", True, "torch")


@pytest.mark.parametrize("model", ["separate", "fused"])
def test_output_recomputed_in_the_backward_not_saved(model):
    """Under AOTAutograd (the Inductor inner compiler), a gated activation's output is recomputed in the backward
    from the gate and up its own backward keeps: the compiled graph saves two [N, inter] tensors, not three (or the
    packed [N, 2 inter] alone); gradients as accurate as eager's against fp64."""
    torch.manual_seed(0)
    mlp = (SeparateMLP(F.silu) if model == "separate" else FusedMLP(F.silu)).to(DEVICE)
    x = torch.randn(8, 32, device=DEVICE, requires_grad=True)
    out = torch.compile(mlp, backend="mojo")(x)
    assert [s.op for s in mojo_compile.last_report().sites] == \
        ["mojo.gated_act" if model == "separate" else "mojo.gated_act_fused"]
    saved = [tuple(t.shape) for t in out.grad_fn.saved_tensors]
    assert saved.count((8, 48)) == (2 if model == "separate" else 0) and saved.count((8, 96)) <= 1, saved
    grad = torch.randn_like(out)
    out.backward(grad)
    got = (x.grad, *(p.grad for p in mlp.parameters()))
    from test_cross_entropy import check_as_accurate

    for dtype in (torch.float32, torch.float64):
        ref = mlp.to(dtype)
        for p in ref.parameters():
            p.grad = None
        xr = x.detach().to(dtype).requires_grad_()
        ref(xr).backward(grad.to(dtype))
        want = (xr.grad, *(p.grad for p in ref.parameters()))
        if dtype == torch.float32:
            eager = [w.clone() for w in want]
    names = ["x"] + [n for n, _ in mlp.named_parameters()]
    assert len(names) == len(got) == len(eager) == len(want)
    for name, mine, theirs, truth in zip(names, got, eager, want):
        check_as_accurate(mine, theirs, truth, torch.float32, name)
