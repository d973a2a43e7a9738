"""GPU conformance: what users run, compared with eager. `python -m pytest tests/conformance -n 8` on a GPU machine.

Default options unless a case says otherwise: `torch.compile(model, backend="mojo")`, i.e. the target from the
device (ttx on CUDA) and the Inductor inner compiler. On a machine without CUDA (CI) the same cases run on the torch
target with the eager inner compiler (Inductor on the CPU compiles too slowly for CI), and a few families also run
the Triton kernels under the interpreter: the CPU checks the rewrite and the algorithms, the GPU the compiled kernels.

Each case draws fresh random inputs and compares with eager against an fp64 copy of the model:
  * logits (kept positions of padded batches) and, in training, every parameter's gradient must be as accurate as
    eager's: err(mojo, fp64) <= 2 err(eager, fp64) + floor. The factor 2 leaves room for a different summation order
    of the same fp32 arithmetic (the kernels keep fp32 where eager does); the floor is the output dtype's resolution
    for near-zero errors (1e-6 fp32, 2e-3 bf16 where the dtype's unit roundoff is 3.9e-3);
  * batch 1 and 3, lengths that are no multiple of any block size (7, 11, 13), left and right padding, an all-ones
    mask, positions from the mask (non-arange), two lengths in one process (a recompile, and dynamic=True);
  * generate with a StaticCache in fp32: the same tokens as eager.
The fused sites per family (families.EXPECTED) are asserted on every compile.
"""
from __future__ import annotations

import copy

import pytest
import torch

import mojo_compile
from conftest import DEVICE
from families import FAMILIES, build, expected, near_misses

transformers = pytest.importorskip("transformers")

ON_GPU = DEVICE == "cuda"
# CI (CPU): the torch target with the eager inner compiler; the GPU: default options.
OPTIONS = {} if ON_GPU else {"target": "torch", "inner_compiler": "eager"}
CASES = [(family, attn) for family, (_, attns) in FAMILIES.items() for attn in attns]
DEFAULT_ATTN = {family: attns[0] for family, (_, attns) in FAMILIES.items()}
FLOOR = {torch.float32: 1e-6, torch.bfloat16: 2e-3}


def rel(a, b) -> float:
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def compile_mojo(model, options=None, **kw):
    return torch.compile(model, backend="mojo", options={**OPTIONS, **(options or {})}, **kw)


def padded_batch(batch: int, length: int, side: str):
    """input_ids, attention_mask (int64, 1 = keep) and position ids from the mask (as generate computes them)."""
    ids = torch.randint(3, 256, (batch, length), device=DEVICE)
    mask = torch.ones(batch, length, dtype=torch.long, device=DEVICE)
    for row in range(1, batch):  # row 0 unpadded, the others padded by 2, 4, ...
        pad = min(2 * row, length - 2)
        if side == "left":
            mask[row, :pad] = 0
        elif side == "right":
            mask[row, length - pad:] = 0
    ids = ids.masked_fill(mask == 0, 0)
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    return ids, mask, positions


def assert_sites(family: str, attn: str, labels: bool = False, dtype: torch.dtype = torch.float32):
    """The first graph compiled (the forward) holds exactly the family's expected Mojo ops (and the loss, with
    labels), on ttx on a GPU, and a near miss with its closest pattern and reason for each spelling left unfused."""
    report = mojo_compile.last_report()
    assert report.graphs, "nothing compiled"
    forward = report.graphs[0]
    assert dict(forward.counts()) == expected(family, attn, labels, dtype), (family, attn, dict(forward.counts()))
    misses = forward.near_misses
    assert {m.family for m in misses} == near_misses(family, attn, dtype), (family, attn, misses)
    assert all(m.pattern and m.reason and not m.reason.startswith("could not explain") for m in misses), misses
    if ON_GPU:
        assert {s.target for s in forward.sites} == {"ttx"}, {s.target for s in forward.sites}


def exact_copy(model, family: str):
    """The fp64 reference, on the CPU (small, and fp64 is slow on the GPU's CUDA cores) with SDPA where the
    family accepts it: HF's eager attention in fp64 gives a fully padded query row NaN (seen with transformers
    5.24), and that row's values carry it into the kept rows. Call it through run_exact."""
    exact = copy.deepcopy(model).double().cpu()
    if "sdpa" in FAMILIES[family][1]:
        exact.set_attn_implementation("sdpa")
    if getattr(exact, "_can_set_experts_implementation", lambda: False)():
        exact.set_experts_implementation("eager")  # grouped_mm takes no fp64; the loop over experts is the same math
    return exact


def run_exact(exact, **kwargs):
    """The fp64 copy on the kwargs moved to the CPU; its logits come back on DEVICE."""
    out = exact(**{k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()})
    out.logits = out.logits.to(DEVICE)
    return out


def left_or_right(family: str) -> str:
    """Left padding, except for the families whose only fp64 reference is eager attention (see exact_copy)."""
    return "left" if "sdpa" in FAMILIES[family][1] else "right"


def check_as_accurate(got, eager, exact, dtype, what):
    err, eager_err = rel(got, exact), rel(eager, exact)
    assert err <= 2 * eager_err + FLOOR[dtype], (what, err, eager_err)


# ------------------------------------------------------------------------------------------------------ inference
@pytest.mark.parametrize("family,attn", CASES, ids=[f"{f}-{a}" for f, a in CASES])
def test_inference_fp32_padded_then_unpadded(family, attn):
    """Batch 3, length 11, left padding, positions from the mask; then batch 1, length 13, an all-ones mask (a
    recompile in the same process). Kept positions as accurate as eager's against fp64."""
    model = build(family, torch.float32, attn, DEVICE)
    exact = exact_copy(model, family)
    compiled = compile_mojo(model)
    for batch, length, side in ((3, 11, left_or_right(family)), (1, 13, "none")):
        ids, mask, positions = padded_batch(batch, length, side)
        kwargs = dict(input_ids=ids, attention_mask=mask, position_ids=positions)
        with torch.no_grad():
            got = compiled(**kwargs).logits
            ref = model(**kwargs).logits
            ref64 = run_exact(exact, **kwargs).logits
        keep = mask.bool()
        assert torch.isfinite(got[keep]).all()
        check_as_accurate(got[keep], ref[keep], ref64[keep], torch.float32, (batch, length, side))
    assert_sites(family, attn)


# ------------------------------------------------------------------------------------------------------- training
@pytest.mark.parametrize("family", list(FAMILIES))
def test_training_bf16_right_padded_every_gradient(family):
    """bf16, batch 3, length 11, right padding, labels -100 on the padding: loss (one mojo.cross_entropy) and every
    parameter's gradient as accurate as eager's against the fp64 copy."""
    attn = DEFAULT_ATTN[family]
    model = build(family, torch.bfloat16, attn, DEVICE).train()
    eager_model = copy.deepcopy(model)
    exact = exact_copy(model, family)
    for m in (model, eager_model, exact):
        for module in m.modules():  # dropout off: the comparison is of the arithmetic
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
    ids, mask, positions = padded_batch(3, 11, "right")
    labels = ids.masked_fill(mask == 0, -100)
    kwargs = dict(input_ids=ids, attention_mask=mask, position_ids=positions, labels=labels)
    out = compile_mojo(model)(**kwargs)
    out.loss.backward()
    ref = eager_model(**kwargs)
    ref.loss.backward()
    ref64 = run_exact(exact, **kwargs)
    ref64.loss.backward()
    check_as_accurate(out.loss.detach(), ref.loss.detach(), ref64.loss.detach(), torch.bfloat16, "loss")
    grads = dict(eager_model.named_parameters())
    for (name, p), (_, p64) in zip(model.named_parameters(), exact.named_parameters()):
        if p64.grad is None or p64.grad.abs().max() == 0:  # unused (e.g. an expert no token was routed to)
            continue
        check_as_accurate(p.grad, grads[name].grad, p64.grad, torch.bfloat16, name)
    assert_sites(family, attn, labels=True, dtype=torch.bfloat16)


# ------------------------------------------------------------------------------------------- shapes and compilers
SHAPE_FAMILIES = ["llama", "qwen3", "gemma2", "phi3", "olmo2", "mixtral"]


@pytest.mark.parametrize("family", SHAPE_FAMILIES)
def test_dynamic_two_lengths(family):
    """dynamic=True: one graph for lengths 7 and 13, right-padded batch 3, each as accurate as eager."""
    attn = DEFAULT_ATTN[family]
    model = build(family, torch.float32, attn, DEVICE)
    exact = exact_copy(model, family)
    compiled = compile_mojo(model, dynamic=True)
    for length in (7, 13):
        ids, mask, positions = padded_batch(3, length, "right")
        kwargs = dict(input_ids=ids, attention_mask=mask, position_ids=positions)
        with torch.no_grad():
            got, ref, ref64 = compiled(**kwargs).logits, model(**kwargs).logits, run_exact(exact, **kwargs).logits
        keep = mask.bool()
        check_as_accurate(got[keep], ref[keep], ref64[keep], torch.float32, length)


def padded_inference_as_accurate_as_eager(family: str, dtype: torch.dtype, options: dict) -> None:
    """Batch 3, length 11, padded (left where the fp64 reference allows), compiled with `options`: the kept
    positions' logits as accurate as eager's against fp64."""
    attn = DEFAULT_ATTN[family]
    model = build(family, dtype, attn, DEVICE)
    exact = exact_copy(model, family)
    ids, mask, positions = padded_batch(3, 11, left_or_right(family))
    kwargs = dict(input_ids=ids, attention_mask=mask, position_ids=positions)
    with torch.no_grad():
        got = compile_mojo(model, options)(**kwargs).logits
        ref, ref64 = model(**kwargs).logits, run_exact(exact, **kwargs).logits
    keep = mask.bool()
    check_as_accurate(got[keep], ref[keep], ref64[keep], dtype, "logits")
    assert_sites(family, attn, dtype=dtype)


@pytest.mark.skipif(not ON_GPU, reason="the eager inner compiler is what the CPU runs everywhere else")
@pytest.mark.parametrize("family", SHAPE_FAMILIES)
def test_eager_inner_compiler(family):
    """The other inner compiler, bf16 inference."""
    padded_inference_as_accurate_as_eager(family, torch.bfloat16, {"inner_compiler": "eager"})


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma2"])
@pytest.mark.skipif(ON_GPU, reason="on a GPU every case runs the compiled kernels")
def test_interpreted_kernels(family):
    """CI's view of the Triton target: the kernels under TRITON_INTERPRET=1 (conftest), fp32 inference."""
    padded_inference_as_accurate_as_eager(family, torch.float32, {"target": "ttx"})


# ------------------------------------------------------------------------------------------------------- generate
@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma2", "phi3", "mistral"])
def test_generate_static_cache_gives_eager_tokens(family):
    """fp32 greedy generate with a StaticCache, batch 3 left-padded: the same tokens as eager."""
    attn = DEFAULT_ATTN[family]
    model = build(family, torch.float32, attn, DEVICE)
    ids, mask, _ = padded_batch(3, 7, left_or_right(family))
    kwargs = dict(input_ids=ids, attention_mask=mask, max_new_tokens=6, do_sample=False, cache_implementation="static",
                  pad_token_id=0)
    with torch.no_grad():
        ref = model.generate(**kwargs)
        model.forward = compile_mojo(model.forward)
        got = model.generate(**kwargs)
    assert torch.equal(got, ref), (got, ref)


# ----------------------------------------------------------------------------------------------- the case
@pytest.mark.skipif(not ON_GPU, reason="Llama-3.1-8B dimensions: a GPU case")
def test_llama_8b_dims_batch4_left_padded_prefill():
    """Llama-3.1-8B dimensions (2 layers, vocab 32000), bf16, batch 4 x 2048 left-padded: the kept positions'
    logits as accurate as eager's against an fp64 copy."""
    cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=2,
                                   num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=4096,
                                   rms_norm_eps=1e-5, pad_token_id=0)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").to(DEVICE).eval()
    exact = copy.deepcopy(model).double()
    model = model.to(torch.bfloat16)
    ids = torch.randint(3, 32000, (4, 2048), device=DEVICE)
    mask = torch.ones_like(ids)
    for row, pad in enumerate((0, 17, 300, 1000)):
        mask[row, :pad] = 0
    kwargs = dict(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp_min(0))
    with torch.no_grad():
        got = compile_mojo(model)(**kwargs).logits
        ref = model(**kwargs).logits
        ref64 = exact(**kwargs).logits  # dense: fp64 runs on the GPU
    keep = mask.bool()
    check_as_accurate(got[keep], ref[keep], ref64[keep], torch.bfloat16, "logits")
