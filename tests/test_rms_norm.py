"""RMSNorm and residual-add + RMSNorm: every spelling is found exactly once and computes what eager does; near-misses
are left alone; the ops pass torch.library.opcheck (schema, fake impl, autograd registration, dynamic shapes) on
each target that can run here, reject bad arguments clearly and fall back to torch with a logged reason.

The spellings are written here the way model code writes them (hf-spellings.md N1-N5), independently of the
pattern file. Each is compiled with backend="mojo" (eager inner compiler) on the torch target, which must be
bit-identical to eager, and on the Triton target, which must be as accurate as eager against an fp64 reference.
"""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import mojo_compile
from conftest import DEVICE, TARGETS, rel

EPS = 1e-6


class Llama(nn.Module):  # N1
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(n))

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + EPS)
        return self.weight * x.to(dtype)


class LlamaSquare(Llama):  # x * x and .square() for .pow(2), .float() for .to(float32)
    def forward(self, x):
        h = x.float()
        return self.weight * (h * torch.rsqrt((h * h).mean(-1, keepdim=True) + EPS)).to(x.dtype)


class Llama4(Llama):  # N4: weight on the right, type_as
    def forward(self, x):
        h = x.float()
        return (h * torch.rsqrt(h.square().mean(-1, keepdim=True) + EPS)).type_as(x) * self.weight


class Gemma(Llama):  # N2: 1 + w in fp32, cast last
    def forward(self, x):
        h = x.float()
        out = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
        return (out * (1.0 + self.weight.float())).type_as(x)


class Gemma3n(Llama):  # N2b: pow(-0.5), fp32 weight
    def forward(self, x):
        h = x.float()
        out = h * torch.pow(h.pow(2).mean(-1, keepdim=True) + EPS, -0.5)
        return (out * self.weight.float()).type_as(x)


class Gemma3nNoScale(nn.Module):  # N2b with_scale=False
    def forward(self, x):
        h = x.float()
        return (h * torch.pow(h.pow(2).mean(-1, keepdim=True) + EPS, -0.5)).type_as(x)


class Olmo2(Llama):  # N3: weight multiply in fp32 by promotion, then cast
    def forward(self, x):
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
        return (self.weight * h).to(dtype)


class Helium(Llama):  # N3b
    def forward(self, x):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
        return (self.weight.to(torch.float32) * h).to(x.dtype)


class L2Norm(nn.Module):  # Llama4 qk L2 norm: unweighted
    def forward(self, x):
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)).type_as(x)


class DeepseekV4Unweighted(nn.Module):  # the inverse root is cast, the product is in x's dtype
    def forward(self, x):
        return x * torch.rsqrt(x.float().square().mean(-1, keepdim=True) + EPS).to(x.dtype)


class MeanUnsqueezed(Llama):  # mean without keepdim, the dim put back by unsqueeze: canonicalised to keepdim
    def forward(self, x):
        h = x.float()
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1).unsqueeze(-1) + EPS)).to(x.dtype)


class MeanIndexedNone(Llama):  # the same with `[..., None]` and a positive dim
    def forward(self, x):
        h = x.float()
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(x.dim() - 1)[..., None] + EPS)).to(x.dtype)


class FRmsNorm(Llama):
    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, EPS)


SPELLINGS = {
    "llama": (Llama, "rms_norm.llama"),
    "llama_square": (LlamaSquare, "rms_norm.llama"),
    "llama4": (Llama4, "rms_norm.llama4"),
    "gemma": (Gemma, "rms_norm.gemma"),
    "gemma3n": (Gemma3n, "rms_norm.gemma3n.pow"),
    "gemma3n_no_scale": (lambda n: Gemma3nNoScale(), "rms_norm.unweighted.pow"),
    "olmo2": (Olmo2, "rms_norm.olmo2"),
    "helium": (Helium, "rms_norm.helium"),
    "l2norm": (lambda n: L2Norm(), "rms_norm.unweighted"),
    "deepseek_v4": (lambda n: DeepseekV4Unweighted(), "rms_norm.deepseek_v4"),
    "mean_unsqueezed": (MeanUnsqueezed, "rms_norm.llama"),
    "mean_indexed_none": (MeanIndexedNone, "rms_norm.llama"),
    "rstd_unsqueezed": (lambda n: NoKeepdim(n), "rms_norm.llama"),
    "F.rms_norm": (FRmsNorm, "rms_norm.F_rms_norm"),
    "nn.RMSNorm": (lambda n: nn.RMSNorm(n, eps=EPS), "rms_norm.F_rms_norm"),
    "nn.RMSNorm default eps": (lambda n: nn.RMSNorm(n), "rms_norm.F_rms_norm"),  # eps=None: ATen's default
}


def compiled(module, target, **options):
    return torch.compile(module, backend="mojo", dynamic=False,
                         options={"inner_compiler": "eager", "target": target, **options})


def fp64_twin(module):
    import copy
    return copy.deepcopy(module).double()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("name", list(SPELLINGS))
def test_spelling_fused_once_and_equal(name, dtype, target):
    make, pattern = SPELLINGS[name]
    module = make(96).to(DEVICE, dtype)
    x = torch.randn(3, 5, 96, device=DEVICE, dtype=dtype) * 2
    eager = module(x)
    out = compiled(module, target)(x)
    sites = mojo_compile.last_report().sites
    if dtype == torch.float32:  # without casts several spellings trace alike: the first registered names them
        pattern = sites[0].pattern if sites and sites[0].pattern.startswith("rms_norm.") else pattern
    assert [(s.op, s.pattern, s.target) for s in sites] == [("mojo.rms_norm", pattern, target)]
    assert out.dtype == eager.dtype and out.shape == eager.shape
    if target == "torch" and name.startswith(("F.rms_norm", "nn.RMSNorm")) and DEVICE == "cuda":
        # On CUDA eager F.rms_norm is a fused kernel of its own; the reference spells out the same math.
        torch.testing.assert_close(out, eager, rtol=2 * torch.finfo(dtype).eps, atol=torch.finfo(dtype).tiny)
    elif target == "torch":
        assert torch.equal(out, eager)  # the reference is the spelling itself
    else:
        exact = fp64_twin(module)(x.double())
        assert rel(out, exact) <= rel(eager, exact) * 1.5 + 1e-7, (rel(out, exact), rel(eager, exact))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_rms_norm_default_eps_is_atens(dtype, target):
    """nn.RMSNorm(d) leaves eps None: ATen then uses the epsilon of its fp32 computation for bf16 / fp16 too, not
    finfo(dtype).eps (65536x larger for bf16). Activations of 1e-3 make the difference visible."""
    module = nn.RMSNorm(64).to(DEVICE, dtype)
    with torch.no_grad():
        module.weight.add_(0.1 * torch.randn_like(module.weight))
    x = (torch.randn(4, 7, 64, device=DEVICE) * 1e-3).to(dtype)
    out = compiled(module, target)(x)
    assert mojo_compile.last_report().counts() == {"mojo.rms_norm": 1}
    eager = module(x)
    wrong = F.rms_norm(x, (64,), module.weight, torch.finfo(dtype).eps)
    if dtype != torch.float32:
        assert not torch.equal(eager, wrong)  # the inputs do tell the two epsilons apart
    if target == "torch" and DEVICE != "cuda":
        assert torch.equal(out, eager)
    else:  # against fp64 with ATen's epsilon (fp32's): as accurate as eager, as in test_spelling_fused_once_and_equal
        exact = F.rms_norm(x.double(), (64,), module.weight.double(), torch.finfo(torch.float32).eps)
        assert rel(out, exact) <= rel(eager, exact) * 1.5 + 1e-7, (rel(out, exact), rel(eager, exact))


@pytest.mark.parametrize("target", TARGETS)
def test_mixed_precision_weight(target):
    """bf16 activations with an fp32 weight (Llama spelling): the output promotes to fp32, as in eager."""
    module = Llama(64).to(DEVICE)  # fp32 weight
    x = torch.randn(4, 64, device=DEVICE, dtype=torch.bfloat16)
    out = compiled(module, target)(x)
    assert mojo_compile.last_report().counts() == {"mojo.rms_norm": 1}
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, module(x), rtol=2 * 2 ** -8, atol=1e-6)


class PreNormBlock(nn.Module):
    """The P1 residual chain: sum = residual + branch feeds the next norm and the next residual."""

    def __init__(self, n, norm=Llama):
        super().__init__()
        self.norm1, self.norm2, self.final = norm(n), norm(n), norm(n)
        self.proj = nn.Linear(n, n, bias=False)

    def forward(self, x):
        residual = x
        h = self.proj(self.norm1(x))
        h = residual + h
        residual = h
        h = self.proj(self.norm2(h))
        h = residual + h
        return self.final(h)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("norm", [Llama, Gemma, Olmo2], ids=["llama", "gemma", "olmo2"])
def test_residual_chain(norm, target):
    block = PreNormBlock(64, norm).to(DEVICE, torch.bfloat16)
    x = torch.randn(2, 7, 64, device=DEVICE, dtype=torch.bfloat16)
    out = compiled(block, target)(x)
    report = mojo_compile.last_report()
    assert report.counts() == {"mojo.rms_norm": 1, "mojo.add_rms_norm": 2}
    assert [s.source for s in report.sites] == ["norm1", "norm2", "final"]
    if target == "torch":
        assert torch.equal(out, block(x))
    else:
        torch.testing.assert_close(out, block(x), rtol=0.05, atol=0.05)  # bf16, through a Linear


SHARED_NORM = Llama(64)  # a module reached through a global, as transformers' hub-kernel wrappers are


class UsesSharedNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.Linear(64, 64, bias=False)

    def forward(self, x):
        return SHARED_NORM(self.attn(x))


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = UsesSharedNorm()

    def forward(self, x):
        return self.inner(x)


def test_site_reached_through_a_global_module_is_named_by_the_model():
    """The report names a site by its place in the compiled model. A module the model calls through a global has no
    place there: the site is the model module around it (`inner`); with no model module around it, the global."""
    x = torch.randn(2, 5, 64)
    compiled(Outer(), "torch")(x)
    assert [s.source for s in mojo_compile.last_report().sites] == ["inner"]

    torch._dynamo.reset()
    mojo_compile.reset_report()
    compiled(lambda t: SHARED_NORM(t), "torch")(x)
    assert [s.source for s in mojo_compile.last_report().sites] == ["SHARED_NORM"]


def test_sum_used_elsewhere_comes_from_the_op():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = Llama(32)

        def forward(self, x, r):
            s = x + r
            return self.norm(s), s * 2

    block = Block().to(DEVICE, torch.bfloat16)
    x, r = (torch.randn(4, 32, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
    out = compiled(block, "torch")(x, r)
    assert mojo_compile.last_report().counts() == {"mojo.add_rms_norm": 1}
    assert all(torch.equal(a, b) for a, b in zip(out, block(x, r)))


# --------------------------------------------------------------------------------------------- must not match
class OtherDim(Llama):  # reduction over another dim
    def forward(self, x):
        h = x.float()
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(1, keepdim=True) + EPS)).to(x.dtype)


class NoKeepdim(Llama):  # mean without keepdim, the inverse root broadcast back by hand (fused: canonicalised)
    def forward(self, x):
        h = x.float()
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1) + EPS).unsqueeze(-1)).to(x.dtype)


class OtherDimUnsqueezed(Llama):  # mean over the last dim put back as another one: a different broadcast
    def forward(self, x):
        h = x.float()
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1) + EPS).unsqueeze(-1).transpose(-1, -2)).to(x.dtype)


class MeanUnsqueezedThenWritten(Llama):  # the rstd view written in place afterwards: canonicalisation keeps it
    def forward(self, x):
        h = x.float()
        r = torch.rsqrt(h.pow(2).mean(-1) + EPS)
        r1 = r.unsqueeze(-1)
        y = self.weight * (h * r1).to(x.dtype)
        r1.mul_(2.0)
        return y, r


class IntermediateReused(Llama):  # the normalised fp32 value escapes: fusing would change what it returns
    def forward(self, x):
        h = x.float()
        n = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
        return self.weight * n.to(x.dtype), n


class CastElsewhere(Llama):  # casts to a dtype other than the input's
    def forward(self, x):
        h = x.float()
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)).to(torch.float16)


class HeadWeight(nn.Module):  # Cohere-style (H, D) weight: not one value per column
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 16))

    def forward(self, x):
        h = x.float()
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype)


# name -> (module, input shape, patterns that may match). The spelling as a whole must never match; where its
# fp32 core (x32 * rsqrt(mean(x32^2) + eps)) is intact, that core alone is a valid unweighted norm of the upcast.
NEGATIVE = {
    "nn.LayerNorm": (lambda: nn.LayerNorm(64), (3, 64), ["layer_norm.F_layer_norm"]),  # its own family, no RMSNorm
    "other_dim": (lambda: OtherDim(64), (3, 64, 64), []),
    "unsqueezed_into_another_dim": (lambda: OtherDimUnsqueezed(64), (3, 64, 64), []),
    "unsqueezed_then_written": (lambda: MeanUnsqueezedThenWritten(64), (3, 64), []),
    "cast_elsewhere": (lambda: CastElsewhere(64), (3, 64), ["rms_norm.unweighted"]),
    "head_weight": (HeadWeight, (2, 3, 4, 16), ["rms_norm.unweighted"]),
}


@pytest.mark.parametrize("name", list(NEGATIVE))
def test_near_misses_are_not_fused(name):
    make, shape, allowed = NEGATIVE[name]
    module = make().to(DEVICE, torch.bfloat16)
    x = torch.randn(*shape, device=DEVICE, dtype=torch.bfloat16)
    out = compiled(module, "torch")(x)
    assert [s.pattern for s in mojo_compile.last_report().sites] == allowed
    ref = module(x)
    for a, b in zip(out if isinstance(out, tuple) else (out,), ref if isinstance(ref, tuple) else (ref,)):
        assert torch.equal(a, b)


def test_reused_intermediate_blocks_the_whole_spelling():
    """The normalised fp32 value escapes, so the Llama spelling cannot be replaced as a whole; only its fp32 core
    (an unweighted norm of the upcast input, which computes that escaping value) may be fused."""
    module = IntermediateReused(64).to(DEVICE, torch.bfloat16)
    x = torch.randn(3, 64, device=DEVICE, dtype=torch.bfloat16)
    out = compiled(module, "torch")(x)
    assert [s.pattern for s in mojo_compile.last_report().sites] == ["rms_norm.unweighted"]
    assert all(torch.equal(a, b) for a, b in zip(out, module(x)))


def test_unfused_site_is_reported():
    out = compiled(OtherDim(64).to(DEVICE), "torch", disable=["add_rms_norm"])(torch.randn(2, 64, 64, device=DEVICE))
    notes = mojo_compile.last_report().graphs[0].notes
    assert any(note.startswith("rms_norm: 1 aten.rsqrt.default left unfused") for note in notes), notes
    assert out.shape == (2, 64, 64)


def test_disable_option_turns_a_family_off():
    block = PreNormBlock(64).to(DEVICE, torch.bfloat16)
    x = torch.randn(2, 3, 64, device=DEVICE, dtype=torch.bfloat16)
    compiled(block, "torch", disable=["add_rms_norm"])(x)
    assert mojo_compile.last_report().counts() == {"mojo.rms_norm": 3}
    torch._dynamo.reset()
    mojo_compile.reset_report()
    compiled(block, "torch", disable=["rms_norm.*", "add_rms_norm"])(x)
    assert mojo_compile.last_report().counts() == {}


# ------------------------------------------------------------------------------------------------------ the ops
mojo = torch.ops.mojo


def op_inputs(dtype=torch.bfloat16, shape=(3, 5, 40)):
    x = torch.randn(*shape, device=DEVICE, dtype=dtype, requires_grad=True)
    r = torch.randn(*shape, device=DEVICE, dtype=dtype, requires_grad=True)
    w = torch.randn(shape[-1], device=DEVICE, dtype=dtype, requires_grad=True)
    return x, r, w


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("cast", ["normed", "output", "rstd"])
def test_opcheck_rms_norm(target, cast):
    x, _, w = op_inputs()
    torch.library.opcheck(mojo.rms_norm.default, (x, w, 1e-6, 0.0, cast, target))
    torch.library.opcheck(mojo.rms_norm.default, (x, None, 1e-5, 0.0, cast, target))


@pytest.mark.parametrize("target", TARGETS)
def test_opcheck_add_rms_norm(target):
    x, r, w = op_inputs()
    torch.library.opcheck(mojo.add_rms_norm.default, (x, r, w, 1e-6, 1.0, "output", target))
    torch.library.opcheck(mojo.add_rms_norm.default, (x, r, None, 1e-6, 0.0, "normed", target))


@pytest.mark.parametrize("target", TARGETS)
def test_opcheck_backward(target):
    x, r, w = (t.detach() for t in op_inputs(torch.float32))
    rstd = torch.rand(3, 5, device=DEVICE) + 0.5
    torch.library.opcheck(mojo.rms_norm_backward.default, (torch.randn_like(x), x, w, rstd, None, 0.0, "normed", True,
                                                           target))
    torch.library.opcheck(mojo.rms_norm_backward.default, (torch.randn_like(x), x, None, rstd, r, 0.0, "output",
                                                           False, target))


def test_bad_arguments_are_clear_errors():
    x, r, w = op_inputs()
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
