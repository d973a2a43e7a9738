"""LayerNorm -> `mojo::layer_norm`, a family declared through the extension API (ops/layer_norm.py,
patterns/layer_norm.py, kernels/layer_norm.py: no central list edited). nn.LayerNorm with a weight and a bias, a
weight alone, neither, a non-default eps, and F.layer_norm in user code: fused once; on the torch target eager's
numbers bit for bit, gradients included (Inductor too); on ttx as accurate as eager against fp64. A norm over two
dims is not matched; the ops pass opcheck; an input the kernels cannot take falls back with its reason."""
import copy
import logging
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mojo_compile
from conftest import DEVICE, TARGETS, mojo_options
from mojo_compile import lowering
from test_cross_entropy import check_as_accurate

FORMS = {  # name: (nn.LayerNorm kwargs, pattern)
    "affine": (dict(), "layer_norm.F_layer_norm"),
    "no_bias": (dict(bias=False), "layer_norm.F_layer_norm_no_bias"),
    "no_affine": (dict(elementwise_affine=False), "layer_norm.F_layer_norm_no_affine"),
    "eps": (dict(eps=1e-6), "layer_norm.F_layer_norm"),
}


class Block(nn.Module):
    def __init__(self, hidden=96, **norm):
        super().__init__()
        self.up = nn.Linear(64, hidden)
        self.norm = nn.LayerNorm(hidden, **norm)
        self.down = nn.Linear(hidden, 8)

    def forward(self, x):
        return self.down(self.norm(self.up(x)))


def block(form, dtype):
    torch.manual_seed(0)
    model = Block(**FORMS[form][0]).to(DEVICE, dtype)
    with torch.no_grad():  # norm parameters away from their init (ones / zeros) so a wrong one would show
        for p in model.norm.parameters():
            p.add_(0.5 * torch.randn_like(p))
    return model


def step(model, x):
    """Output and every gradient (input first, then the parameters by name) of one backward of a random gradient."""
    model.zero_grad()
    x = x.detach().clone().requires_grad_()
    out = model(x)
    out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out))
    params = {name.removeprefix("_orig_mod."): p.grad.clone() for name, p in model.named_parameters()}
    return out.detach(), {"x": x.grad, **params}


@pytest.mark.parametrize("target", TARGETS + ["torch+inductor"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("form", list(FORMS))
def test_fused_and_equal_to_eager(form, dtype, target):
    if target == "torch+inductor" and form not in ("affine", "no_affine"):
        pytest.skip("Inductor on the CPU is slow: two forms")
    model = block(form, dtype)
    x = torch.randn(3, 5, 64, device=DEVICE).to(dtype)
    compiled = torch.compile(model, backend="mojo", options=mojo_options(target))
    out, grads = step(compiled, x)
    sites = [(s.pattern, s.op, s.target) for s in mojo_compile.last_report().sites]
    assert sites == [(FORMS[form][1], "mojo.layer_norm", target.partition("+")[0])], sites
    exact = block(form, torch.float64)
    check_against_eager(target, dtype, (out, grads), step(model, x), exact, model,
                        lambda exact: step(exact, x.double()))


def check_against_eager(target, dtype, got, eager, exact, model, run_exact):
    """The torch target (aten's own layer norm and backward): eager's output and gradients bit for bit; ttx: as
    accurate as eager's against the fp64 copy `exact` of `model`, run by run_exact."""
    (out, grads), (eager_out, eager_grads) = got, eager
    if target == "torch":
        assert torch.equal(out, eager_out)
        for name in grads:
            assert torch.equal(grads[name], eager_grads[name]), name
        return
    exact.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
    exact_out, exact_grads = run_exact(exact)
    check_as_accurate(out, eager_out, exact_out, dtype, "out")
    for name in grads:
        check_as_accurate(grads[name], eager_grads[name], exact_grads[name], dtype, name)


class AddBlock(nn.Module):
    """A pre-norm residual block: the sum is normalised and kept as the next residual; the final norm's sum has no
    other use."""
    def __init__(self, hidden=96, **norm):
        super().__init__()
        self.up = nn.Linear(64, hidden)
        self.norm, self.final = nn.LayerNorm(hidden, **norm), nn.LayerNorm(hidden, **norm)
        self.mix = nn.Linear(hidden, hidden)

    def forward(self, x, residual):
        h = self.up(x) + residual
        h = self.mix(self.norm(h)) + h
        return self.final(h + residual)


def add_block(form, dtype):
    torch.manual_seed(0)
    model = AddBlock(**FORMS[form][0]).to(DEVICE, dtype)
    with torch.no_grad():
        for module in (model.norm, model.final):
            for p in module.parameters():
                p.add_(0.5 * torch.randn_like(p))
    return model


def add_step(model, x, residual):
    """Output and every gradient (x, residual, then the parameters) of one backward of a random gradient."""
    model.zero_grad()
    x, residual = (t.detach().clone().requires_grad_() for t in (x, residual))
    out = model(x, residual)
    out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out))
    params = {name.removeprefix("_orig_mod."): p.grad.clone() for name, p in model.named_parameters()}
    return out.detach(), {"x": x.grad, "residual": residual.grad, **params}


@pytest.mark.parametrize("target", TARGETS + ["torch+inductor"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("form", ["affine", "no_bias", "no_affine"])
def test_add_layer_norm_fused_and_equal_to_eager(form, dtype, target):
    """Both residual adds before a norm become add_layer_norm (the sum reused as the next residual, and not); on
    the torch target eager's numbers and gradients bit for bit, on ttx as accurate as eager against fp64."""
    if target == "torch+inductor" and (form != "affine" or dtype != torch.bfloat16):
        pytest.skip("Inductor on the CPU is slow: one case")
    model = add_block(form, dtype)
    x, residual = torch.randn(3, 5, 64, device=DEVICE).to(dtype), torch.randn(3, 5, 96, device=DEVICE).to(dtype)
    compiled = torch.compile(model, backend="mojo", options=mojo_options(target))
    out, grads = add_step(compiled, x, residual)
    pattern = "add_" + FORMS[form][1]
    sites = [(s.pattern, s.op) for s in mojo_compile.last_report().sites]
    assert sites == [(pattern, "mojo.add_layer_norm")] * 2, sites
    check_against_eager(target, dtype, (out, grads), add_step(model, x, residual), add_block(form, torch.float64),
                        model, lambda exact: add_step(exact, x.double(), residual.double()))


ADD_REFUSALS = {  # name: (fn of x [4, 32] bf16 and a [32] bf16 vector, why the add is not the op's)
    "broadcast residual": (lambda x, v: F.layer_norm(x + v, (32,)), "broadcast"),
    "promoting residual": (lambda x, v: F.layer_norm(x + x.float(), (32,)), "promoting"),
    "alpha": (lambda x, v: F.layer_norm(torch.add(x, x, alpha=2), (32,)), "alpha"),
}


@pytest.mark.parametrize("case", list(ADD_REFUSALS))
def test_add_layer_norm_refuses_another_add(case, caplog):
    """A broadcast, promoting or scaled add is not x + residual: the norm alone fuses, eager's numbers."""
    fn, _why = ADD_REFUSALS[case]
    x, v = torch.randn(4, 32, device=DEVICE, dtype=torch.bfloat16), torch.randn(32, device=DEVICE,
                                                                                 dtype=torch.bfloat16)
    out = torch.compile(fn, backend="mojo", options=mojo_options("torch"))(x, v)
    assert [s.op for s in mojo_compile.last_report().sites] == ["mojo.layer_norm"]
    assert torch.equal(out, fn(x, v))


def test_add_layer_norm_refused_under_autocast():
    """Under CUDA autocast eager adds in bf16 and normalises the sum in fp32: not the op's contract, so the add stays
    eager's and the norm alone fuses (the plain op follows autocast)."""
    def fn(x, r):
        return F.layer_norm(x + r, (32,))

    x, r = (torch.randn(4, 32, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        out = torch.compile(fn, backend="mojo", options=mojo_options("torch"))(x, r)
        ref = fn(x, r)
    assert [s.op for s in mojo_compile.last_report().sites] == ["mojo.layer_norm"]
    assert out.dtype == ref.dtype and torch.equal(out, ref)


@pytest.mark.parametrize("target", TARGETS)
def test_add_opcheck(target):
    x, r = (torch.randn(3, 5, 40, device=DEVICE, requires_grad=True) for _ in range(2))
    w, b = (torch.randn(40, device=DEVICE, requires_grad=True) for _ in range(2))
    for params in ((w, b), (w, None), (None, None)):
        torch.library.opcheck(torch.ops.mojo.add_layer_norm.default, (x, r, *params, 1e-5, target))
    y, total, mean, rstd = torch.ops.mojo.add_layer_norm(x, r, w, b, 1e-5, target)
    gy, gr = torch.randn_like(y), torch.randn_like(y)
    torch.library.opcheck(torch.ops.mojo.layer_norm_backward.default,
                          (gy, total.detach(), w.detach(), mean, rstd, 1e-5, True, True, gr, target))


@pytest.mark.parametrize("target", TARGETS)
def test_add_backward_hands_both_summands_one_gradient(target):
    """x and residual get the sum's gradient as one tensor, as eager's add backward hands them (a copy would be a
    read and a write of the activation per site). Leaves still get .grad tensors of their own (autograd copies), so
    an in-place update of one (clip_grad_norm_) leaves the other's alone."""
    x, r = (torch.randn(3, 5, 40, device=DEVICE, requires_grad=True) for _ in range(2))
    w, b = (torch.randn(40, device=DEVICE, requires_grad=True) for _ in range(2))
    y, total, _, _ = torch.ops.mojo.add_layer_norm(x, r, w, b, 1e-5, target)
    gy, gt = torch.randn_like(y), torch.randn_like(total)
    gx, gr = torch.autograd.grad((y, total), (x, r), (gy, gt), retain_graph=True)
    assert gx is gr
    exact = [t.detach().double().requires_grad_() for t in (x, r, w, b)]
    total64 = exact[0] + exact[1]
    y64 = F.layer_norm(total64, (40,), exact[2], exact[3], 1e-5)
    (want,) = torch.autograd.grad((y64, total64), (exact[0],), (gy.double(), gt.double()))
    assert torch.allclose(gx.double(), want, rtol=1e-4, atol=1e-5)  # fp32 against fp64: rounding only
    torch.autograd.backward((y, total), (gy, gt))
    assert x.grad.data_ptr() != r.grad.data_ptr()
    x.grad.mul_(0.5)
    assert torch.equal(r.grad, gr)


@pytest.mark.parametrize("target", TARGETS)
def test_f_layer_norm_in_user_code(target):
    """F.layer_norm with parameters given as tensors, rows of an odd width and a 2-D input."""
    x = torch.randn(7, 37, device=DEVICE)
    w, b = torch.randn(37, device=DEVICE), torch.randn(37, device=DEVICE)

    def fn(x, w, b):
        return F.layer_norm(x, (37,), w, b, 1e-3) * 2

    out = torch.compile(fn, backend="mojo", options=mojo_options(target))(x, w, b)
    assert [s.op for s in mojo_compile.last_report().sites] == ["mojo.layer_norm"]
    assert torch.allclose(out, fn(x, w, b), rtol=1e-5, atol=1e-5)  # fp32: ttx sums in another order


@pytest.mark.parametrize("form", ["no_bias", "no_affine"])
def test_a_form_is_claimed_by_its_own_pattern_only(form):
    """The affine pattern's bias (and weight) parameters do not bind a None: with the form's own pattern disabled the
    norm is left to eager, not claimed by the affine one (whose check torch 2.11 hands a match without the None)."""
    model = block(form, torch.float32)
    x = torch.randn(3, 5, 64, device=DEVICE)
    options = {**mojo_options("torch"), "disable": [FORMS[form][1]]}
    out = torch.compile(model, backend="mojo", options=options)(x)
    assert mojo_compile.last_report().sites == [] and torch.equal(out, model(x))


def test_a_norm_over_two_dims_is_not_matched():
    x = torch.randn(3, 4, 16, device=DEVICE)

    def fn(x):
        return F.layer_norm(x, (4, 16))

    out = torch.compile(fn, backend="mojo", options=mojo_options("torch"))(x)
    assert mojo_compile.last_report().sites == [] and torch.equal(out, fn(x))


@pytest.mark.skipif(len(TARGETS) < 2, reason="needs the ttx target")
def test_weight_of_another_dtype_falls_back_with_its_reason(caplog):
    """bf16 x with an fp32 weight: the kernels do not take it, the torch reference does as eager does (the CPU's
    aten computes it, CUDA's raises)."""
    x = torch.randn(4, 32, device=DEVICE, dtype=torch.bfloat16)
    w = torch.randn(32, device=DEVICE)
    try:
        expected = F.layer_norm(x, (32,), w, None, 1e-5)
    except RuntimeError as error:
        expected = error
    lowering._LOGGED.clear()
    with caplog.at_level(logging.WARNING, logger="mojo_compile"):
        if isinstance(expected, RuntimeError):
            with pytest.raises(RuntimeError, match=re.escape(str(expected))):
                torch.ops.mojo.layer_norm(x, w, None, 1e-5, target="ttx")
        else:
            assert torch.equal(torch.ops.mojo.layer_norm(x, w, None, 1e-5, target="ttx")[0], expected)
    assert "layer_norm: ttx falls back to torch: a weight, bias or gradient of another dtype" in caplog.text


@pytest.mark.parametrize("target", TARGETS)
def test_opcheck(target):
    x = torch.randn(3, 5, 40, device=DEVICE, requires_grad=True)
    w, b = (torch.randn(40, device=DEVICE, requires_grad=True) for _ in range(2))
    for args in ((x, w, b), (x, w, None), (x, None, None)):
        torch.library.opcheck(torch.ops.mojo.layer_norm.default, (*args, 1e-5, target))


def test_op_rejects_bad_arguments():
    with pytest.raises(ValueError, match="weight must be"):
        torch.ops.mojo.layer_norm(torch.randn(2, 8), torch.randn(7), None, 1e-5)
    with pytest.raises(ValueError, match="x must be"):
        torch.ops.mojo.layer_norm(torch.randn(2, 8).long(), None, None, 1e-5)
    with pytest.raises(ValueError, match="must match x"):
        torch.ops.mojo.add_layer_norm(torch.randn(2, 8), torch.randn(8), None, None, 1e-5)
    with pytest.raises(ValueError, match="must match x"):
        torch.ops.mojo.add_layer_norm(torch.randn(2, 8), torch.randn(2, 8, dtype=torch.bfloat16), None, None, 1e-5)


# ------------------------------------------------------------------------------------------ tiny Hugging Face models
HF_FAMILIES = {
    "gpt_neox": lambda t: t.GPTNeoXConfig(**_HF_COMMON),
    "stablelm": lambda t: t.StableLmConfig(**_HF_COMMON, num_key_value_heads=2),
    "starcoder2": lambda t: t.Starcoder2Config(**_HF_COMMON, num_key_value_heads=2),
    "phi": lambda t: t.PhiConfig(**_HF_COMMON),  # Phi-2: parallel attention and MLP read one LayerNorm
}
# Norms of a sum of the residual: every layer's after the first (the input norm of the next layer, or StableLM's and
# Starcoder2's post-attention norm too) and the final one; GPT-NeoX and Phi add attention and MLP in parallel.
ADD_SITES = {"gpt_neox": 2, "stablelm": 4, "starcoder2": 4, "phi": 2}
_HF_COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  max_position_embeddings=256)


@pytest.mark.parametrize("family", list(HF_FAMILIES))
def test_hf_models_every_layer_norm_fused(family):
    """Unmodified tiny HF models (bf16, with labels), torch target: every nn.LayerNorm of the model is one fused
    site; logits bit for bit those of the same Dynamo graph run eagerly; every gradient as accurate as eager's
    against an fp64 copy."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(HF_FAMILIES[family](transformers))
    with torch.no_grad():  # norm parameters away from their init so a wrong one would show
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                for p in module.parameters():
                    p.add_(0.2 * torch.randn_like(p))
    model = model.to(DEVICE, torch.bfloat16)
    golden = copy.deepcopy(model).double()
    norms = sum(isinstance(m, nn.LayerNorm) for m in model.modules())
    ids = torch.randint(3, 256, (2, 12), device=DEVICE)
    options = dict(mojo_options("torch"), disable=["attention"])  # attention: equal to eager only to a tolerance
    out = torch.compile(model, backend="mojo", options=options)(input_ids=ids, labels=ids)
    out.loss.backward()
    counts = mojo_compile.last_report().counts()
    assert counts.get("mojo.layer_norm", 0) + counts.get("mojo.add_layer_norm", 0) == norms, counts
    assert counts.get("mojo.add_layer_norm", 0) == ADD_SITES[family], counts  # a residual add before the norm
    got = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    ref = torch.compile(model, backend="eager")(input_ids=ids, labels=ids)
    ref.loss.backward()
    assert torch.equal(out.logits, ref.logits)
    exact = golden(input_ids=ids, labels=ids)
    exact.loss.backward()
    for (name, p), (_, p64) in zip(model.named_parameters(), golden.named_parameters()):
        check_as_accurate(got[name], p.grad, p64.grad, torch.bfloat16, name)


@pytest.mark.parametrize("qk_norm", [False, True], ids=["plain", "qk_norm"])
def test_hf_cohere_hand_written_layer_norm(qk_norm):
    """Cohere's own LayerNorm (hf-spellings.md N6: mean-subtracting, no bias, the weight cast to fp32), unmodified
    tiny HF model: its three norms are layer_norm sites, run in fp32 as the spelling is (the residual adds before
    them stay the model's). Its qk-norm (a [H, D] weight) is refused and stays eager's. fp32: eager's logits to
    fp32 rounding (aten's layer norm sums in another order); bf16: every gradient as accurate as eager's against
    fp64."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.cohere.modeling_cohere import CohereLayerNorm

    torch.manual_seed(0)
    config = transformers.CohereConfig(**_HF_COMMON, num_key_value_heads=2, use_qk_norm=qk_norm)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, CohereLayerNorm):
                module.weight.add_(0.2 * torch.randn_like(module.weight))
    golden = copy.deepcopy(model).double().to(DEVICE)
    ids = torch.randint(3, 256, (2, 12), device=DEVICE)
    options = dict(mojo_options("torch"), disable=["attention"])
    fp32 = model.to(DEVICE)
    out = torch.compile(fp32, backend="mojo", options=options)(input_ids=ids)
    counts = mojo_compile.last_report().counts()
    assert counts["mojo.layer_norm"] == 3 and "mojo.add_layer_norm" not in counts, counts
    assert "mojo.rms_norm" not in counts and "mojo.add_rms_norm" not in counts  # never taken for an RMSNorm
    torch.testing.assert_close(out.logits, fp32(input_ids=ids).logits)  # fp32: both to fp32 rounding
    torch._dynamo.reset()
    model = fp32.to(torch.bfloat16)
    out = torch.compile(model, backend="mojo", options=options)(input_ids=ids, labels=ids)
    out.loss.backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model(input_ids=ids, labels=ids).loss.backward()
    exact = golden(input_ids=ids, labels=ids)
    exact.loss.backward()
    for (name, p), (_, p64) in zip(model.named_parameters(), golden.named_parameters()):
        check_as_accurate(got[name], p.grad, p64.grad, torch.bfloat16, name)


class CohereNorm(nn.Module):
    """hf-spellings.md N6, as Cohere writes it."""
    def __init__(self, hidden, weight_dtype):
        super().__init__()
        self.weight = nn.Parameter((1 + 0.3 * torch.randn(hidden)).to(weight_dtype))

    def forward(self, x):
        h = x.to(torch.float32)
        mean = h.mean(-1, keepdim=True)
        variance = (h - mean).pow(2).mean(-1, keepdim=True)
        h = (h - mean) * torch.rsqrt(variance + 1e-5)
        return (self.weight.to(torch.float32) * h).to(x.dtype)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("weight_dtype", [torch.bfloat16, torch.float32, torch.float16], ids=["bf16", "fp32", "fp16"])
def test_cohere_norm_as_accurate_as_its_spelling(weight_dtype, target):
    """bf16 activations with a weight of any float dtype (the spelling casts it to fp32, exactly): fused, and the
    output and every gradient as accurate as eager's against fp64 -- the spelling's math is fp32 throughout, so the
    op's backward must be too (aten's CPU bf16 backward would keep bf16 statistics)."""
    torch.manual_seed(0)
    norm = CohereNorm(256, weight_dtype).to(DEVICE)
    x = (torch.randn(64, 256, device=DEVICE) * 2 + 0.5).to(torch.bfloat16)
    gy = torch.randn(64, 256, device=DEVICE).to(torch.bfloat16)

    def run(module, x):
        x = x.detach().clone().requires_grad_()
        module.zero_grad()
        y = module(x)
        y.backward(gy.to(y.dtype))
        return y.detach(), x.grad, module.weight.grad.clone()

    got = run(torch.compile(norm, backend="mojo", options=mojo_options(target)), x)
    assert [s.pattern for s in mojo_compile.last_report().sites] == ["layer_norm.cohere"]
    eager = run(norm, x)
    exact_norm = copy.deepcopy(norm).double()
    exact_norm.forward = lambda h: _cohere_fp64(h, exact_norm.weight)
    exact = run(exact_norm, x.double())
    for name, g, e, x64 in zip(("out", "x", "weight"), got, eager, exact):
        assert g.dtype == e.dtype, name
        check_as_accurate(g, e, x64, torch.bfloat16, name)


def _cohere_fp64(x, weight):
    mean = x.mean(-1, keepdim=True)
    return weight * (x - mean) * torch.rsqrt((x - mean).pow(2).mean(-1, keepdim=True) + 1e-5)


def test_fp64_is_left_to_eager():
    """The op takes bf16 / fp16 / fp32: an fp64 LayerNorm is not fused (and does not fail), eager's numbers."""
    x, w = torch.randn(4, 16, dtype=torch.float64, device=DEVICE), torch.randn(16, dtype=torch.float64, device=DEVICE)

    def fn(x, w):
        return F.layer_norm(x, (16,), w, w, 1e-5)

    out = torch.compile(fn, backend="mojo", options=mojo_options("torch"))(x, w)
    assert mojo_compile.last_report().sites == [] and torch.equal(out, fn(x, w))


@pytest.mark.parametrize("target", TARGETS)
def test_under_autocast_as_eager(target):
    """Under autocast eager's layer_norm runs in fp32 on CUDA (autocast's fp32 list; the result is fp32) and in the
    input dtype on the CPU: the op's result has eager's dtype and values."""
    model = block("affine", torch.float32)
    x = torch.randn(3, 5, 96, device=DEVICE)
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        out = torch.compile(model.norm, backend="mojo", options=mojo_options(target))(x.to(torch.bfloat16))
        ref = model.norm(x.to(torch.bfloat16))
    assert [s.op for s in mojo_compile.last_report().sites] == ["mojo.layer_norm"]
    assert out.dtype == ref.dtype
    if target == "torch":
        assert torch.equal(out, ref)
    elif out.dtype == torch.float32:  # CUDA: fp32 math either way, sums in another order
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    else:  # the CPU: bf16 x with the fp32 weight, which the kernels leave to the torch reference
        assert torch.equal(out, ref)
