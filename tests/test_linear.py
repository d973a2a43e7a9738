"""Decode GEMVs (issue 15): `mojo.linear`, `mojo.gated_linear` and `mojo.linear2` / `mojo.linear3` (the graph pass
`linear.group`). Every spelling of a bias-free projection of 1..4 rows fused with its exact sites; more rows, a bias,
a gradient wanted, different x of gate and up left alone (with the reason); eager's numbers bit for bit on the
torch target, as accurate as eager against fp64 on ttx; a strided weight falls back to torch with its reason;
opcheck for each op; tiny HF Llama and Qwen3 decode steps, eager and Inductor inner compilers."""
import copy
import logging
import types

import pytest
import torch
import torch.nn.functional as F

import mojo_compile
from conftest import DEVICE, KERNEL_TARGET_OK, TARGETS, rel

mojo = torch.ops.mojo
ACTS = {"silu": F.silu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "gelu": F.gelu}
EAGER = {"inner_compiler": "eager"}


def compile_mojo(fn, target="torch", **options):
    return torch.compile(fn, backend="mojo", options={**EAGER, "target": target, **options})


def sites():
    return [(s.pattern, s.op, s.target) for s in mojo_compile.last_report().sites]


def as_accurate(got, eager, exact, dtype):
    """ttx against fp64: both accumulate in fp32 (another order) and round once to the dtype, which dominates in
    fp16 / bf16 (1.25 x eager's error, a rounding flipped now and then); in fp32 the two sums' errors are of one
    order, not ordered (2 x eager's plus a few ulps). See tests/test_kernels_linear.py."""
    err, eager_err = rel(got, exact), rel(eager, exact)
    if dtype == torch.float32:
        assert err <= 2 * eager_err + 4 * 2.0 ** -24, (err, eager_err)
    else:
        assert err <= 1.25 * eager_err + 2.0 ** -20, (err, eager_err)


class Proj(torch.nn.Module):
    """One bias-free projection, in a given spelling."""

    def __init__(self, spelling, k=40, n=24, bias=False):
        super().__init__()
        self.lin = torch.nn.Linear(k, n, bias=bias)
        self.spelling = spelling

    def forward(self, x):
        w = self.lin.weight
        if self.spelling == "linear":
            return self.lin(x)
        if self.spelling == "matmul":
            return x @ w.T
        if self.spelling == "matmul_t":
            return torch.matmul(x, w.t())
        return torch.mm(x.view(-1, x.shape[-1]), w.t())  # "mm"


PATTERN = {"linear": "linear", "matmul": "linear.matmul", "matmul_t": "linear.matmul", "mm": "linear.mm"}


# ------------------------------------------------------------------------------------------------ mojo.linear
@pytest.mark.parametrize("spelling", list(PATTERN))
@pytest.mark.parametrize("rows", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_spellings_fuse_bit_exact(spelling, rows, dtype):
    """[B, 1, K] input for B = 1..4 (a decode step), every spelling: one mojo.linear, eager's numbers exactly."""
    model = Proj(spelling).to(DEVICE, dtype)
    x = torch.randn(rows, 1, 40, device=DEVICE, dtype=dtype)
    with torch.no_grad():
        y = compile_mojo(model)(x)
        assert torch.equal(y, model(x))
    assert sites() == [(PATTERN[spelling], "mojo.linear", "torch")]


@pytest.mark.parametrize("shape", [(5, 1, 40), (1, 5, 40), (2, 3, 40)], ids=["B5", "S5", "B2S3"])
def test_more_than_four_rows_is_a_gemm_left_alone(shape, caplog):
    """A prefill (5 or more rows) stays eager's GEMM; the refusal says why."""
    model = Proj("linear").to(DEVICE)
    x = torch.randn(*shape, device=DEVICE)
    with torch.no_grad(), caplog.at_level(logging.DEBUG, logger="mojo_compile"):
        y = compile_mojo(model)(x)
    assert torch.equal(y, model(x))
    assert sites() == []
    assert "rows: a GEMM (prefill), left to cuBLAS" in caplog.text


def test_bias_is_not_matched():
    model = Proj("linear", bias=True).to(DEVICE)
    x = torch.randn(1, 1, 40, device=DEVICE)
    with torch.no_grad():
        assert torch.equal(compile_mojo(model)(x), model(x))
    assert sites() == []


def test_bias_kwarg_of_an_explicit_f_linear():
    """F.linear(x, w, b) with a bias matches none; F.linear(x, w, None) is bias-free and fuses."""
    w, b = torch.randn(6, 8, device=DEVICE), torch.randn(6, device=DEVICE)
    x = torch.randn(2, 8, device=DEVICE)
    assert torch.equal(compile_mojo(lambda x, w, b: F.linear(x, w, bias=b))(x, w, b), F.linear(x, w, b))
    assert sites() == []
    torch._dynamo.reset()
    assert torch.equal(compile_mojo(lambda x, w: F.linear(x, w, bias=None))(x, w), F.linear(x, w))
    assert [s[1] for s in sites()] == ["mojo.linear"]


def test_needs_grad_is_refused(caplog):
    """No backward: where autograd may want a gradient (training, or grad mode on with parameters that require it)
    the projection stays, with the reason."""
    model = Proj("linear").to(DEVICE)
    x = torch.randn(1, 1, 40, device=DEVICE)
    with caplog.at_level(logging.DEBUG, logger="mojo_compile"):
        y = compile_mojo(model)(x)
    y.sum().backward()
    assert model.lin.weight.grad is not None
    assert sites() == []
    assert "may need a gradient" in caplog.text


def test_symbolic_rows_are_refused(caplog):
    """dynamic=True makes the batch symbolic: the row count is not a static 1..4, the projection stays."""
    model = Proj("linear").to(DEVICE)
    with torch.no_grad(), caplog.at_level(logging.DEBUG, logger="mojo_compile"):
        compiled = torch.compile(model, backend="mojo", options=EAGER, dynamic=True)
        for b in (2, 3):
            x = torch.randn(b, 1, 40, device=DEVICE)
            assert torch.equal(compiled(x), model(x))
    assert all(s.op != "mojo.linear" for s in mojo_compile.last_report().sites)
    assert "the number of rows is symbolic" in caplog.text


@pytest.mark.skipif(not KERNEL_TARGET_OK, reason="needs CUDA or TRITON_INTERPRET=1")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("rows", [1, 4])
def test_ttx_target_as_accurate_as_eager(dtype, rows):
    model = Proj("linear", k=1029, n=37).to(DEVICE, dtype)
    x = torch.randn(rows, 1, 1029, device=DEVICE, dtype=dtype)
    with torch.no_grad():
        y = compile_mojo(model, "ttx")(x)
        eager = model(x)
    assert sites() == [("linear", "mojo.linear", "ttx")]
    assert y.dtype == dtype and y.shape == eager.shape
    as_accurate(y, eager, x.double() @ model.lin.weight.double().T, dtype)


@pytest.mark.skipif(not KERNEL_TARGET_OK, reason="needs CUDA or TRITON_INTERPRET=1")
@pytest.mark.parametrize("weight", ["transposed", "every_other_column"])
def test_strided_weight_falls_back_with_its_reason(weight):
    """A weight whose last dim is not contiguous matches (it is a projection) but the kernel reads unit-stride
    columns: the site runs the torch reference, the report says why, the numbers are eager's."""
    w_t = torch.randn(40, 24, device=DEVICE)  # [K, N]: its .t() is the [N, K] weight, column stride N
    wide = torch.randn(24, 80, device=DEVICE)

    def fn(x):
        return F.linear(x, w_t.t() if weight == "transposed" else wide[:, ::2])

    x = torch.randn(1, 1, 40, device=DEVICE)
    with torch.no_grad():
        assert torch.equal(compile_mojo(fn, "ttx")(x), fn(x))
    (site,) = mojo_compile.last_report().sites
    assert (site.op, site.target) == ("mojo.linear", "torch")
    assert "a weight's last dim is strided" in site.fallback


@pytest.mark.parametrize("target", TARGETS)
def test_expanded_x_with_row_stride_zero(target):
    """x expanded from one row (row stride 0), as the op sees it called directly: eager's numbers (torch) or as
    accurate (ttx)."""
    x = torch.randn(1, 1029, device=DEVICE, dtype=torch.bfloat16).expand(4, 1029)
    w = torch.randn(37, 1029, device=DEVICE, dtype=torch.bfloat16)
    y = mojo.linear(x, w, target)
    if target == "torch":
        assert torch.equal(y, F.linear(x, w))
    else:
        as_accurate(y, F.linear(x, w), x.double() @ w.double().T, torch.bfloat16)
        assert torch.equal(y, mojo.linear(x.contiguous(), w, target))


@pytest.mark.skipif(not KERNEL_TARGET_OK, reason="needs CUDA or TRITON_INTERPRET=1")
def test_ttx_supports_reasons():
    from mojo_compile.ops.linear import ttx_reason

    w = torch.randn(8, 16, device=DEVICE)
    assert ttx_reason(torch.randn(1, 16, device=DEVICE), w) is None
    assert "5 rows" in ttx_reason(torch.randn(5, 16, device=DEVICE), w)
    assert "0 rows" in ttx_reason(torch.randn(0, 16, device=DEVICE), w)
    assert "is not fp16/bf16/fp32" in ttx_reason(torch.randn(1, 16, device=DEVICE).double(), w.double())
    assert "a weight is torch.bfloat16" in ttx_reason(torch.randn(1, 16, device=DEVICE), w.bfloat16())
    assert "x's last dim is strided" in ttx_reason(torch.randn(16, 2, device=DEVICE).t(), w)
    assert "last dim is strided" in ttx_reason(torch.randn(1, 16, device=DEVICE),
                                               torch.randn(16, 8, device=DEVICE).t())
    assert "last dim is strided" in ttx_reason(torch.randn(1, 16, device=DEVICE),
                                               torch.randn(8, 32, device=DEVICE)[:, ::2])
    # 2-4 rows against a weight where cuBLAS was measured faster (an expanded stand-in: no memory)
    big = torch.randn(1, 4096, device=DEVICE).expand(14336, 4096)
    assert ttx_reason(torch.randn(1, 4096, device=DEVICE), big) is None
    assert "cuBLAS is faster" in ttx_reason(torch.randn(2, 4096, device=DEVICE), big)
    # linear3: the largest weight decides (q [4096, 4096], k and v [1024, 4096] at 2 rows: the GEMV)
    q, kv = big[:4096], big[:1024]
    assert ttx_reason(torch.randn(2, 4096, device=DEVICE), q, kv, kv) is None
    assert "cuBLAS is faster" in ttx_reason(torch.randn(4, 4096, device=DEVICE), q, kv, kv)
    with torch.device("meta"):
        assert "ttx" in ttx_reason(torch.randn(1, 16), torch.randn(8, 16))  # a device ttx does not run on


def test_ttx_on_ascend_falls_back(monkeypatch):
    """The GEMV launches N / BLOCK_N programs; Ascend's launch plans run one program per core, which these kernels
    do not have: on npu tensors (where triton-ascend is installed) ttx falls back to the reference."""
    from mojo_compile.ops import linear

    class NpuTensor:  # what the check reads of an npu tensor (none can be made here)
        device = types.SimpleNamespace(type="npu")
        dtype = torch.bfloat16

    monkeypatch.setattr(linear, "ttx_device_reason", lambda t: None)  # as with triton-ascend installed
    assert "no launch plan for Ascend" in linear.ttx_reason(NpuTensor(), torch.randn(8, 16))


def test_nan_propagates_like_eager():
    x = torch.randn(2, 1, 40, device=DEVICE)
    x[1, 0, 5] = float("nan")
    model = Proj("linear").to(DEVICE)
    with torch.no_grad():
        y = compile_mojo(model)(x)
        ref = model(x)
    assert torch.equal(torch.isnan(y), torch.isnan(ref)) and torch.isnan(y[1]).all()
    assert torch.equal(y[0], ref[0])
    for target in TARGETS[1:]:
        y = mojo.linear(x, model.lin.weight.detach(), target)
        assert torch.equal(torch.isnan(y), torch.isnan(ref)) and torch.isnan(y[1]).all()


# ------------------------------------------------------------------------------------------- mojo.gated_linear
class MLP(torch.nn.Module):
    def __init__(self, act, up_first=False, hidden=40, inter=24, same_x=True):
        super().__init__()
        self.gate_proj = torch.nn.Linear(hidden, inter, bias=False)
        self.up_proj = torch.nn.Linear(hidden, inter, bias=False)
        self.down_proj = torch.nn.Linear(inter, hidden, bias=False)
        self.act, self.up_first, self.same_x = act, up_first, same_x

    def forward(self, x):
        gate = self.act(self.gate_proj(x))
        up = self.up_proj(x if self.same_x else x * 2)
        return self.down_proj(up * gate if self.up_first else gate * up)


@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("up_first", [False, True], ids=["act_first", "up_first"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_gated_mlp_decode(act, up_first, dtype):
    """act(gate(x)) * up(x) then down: one mojo.gated_linear and one mojo.linear, eager's numbers exactly."""
    model = MLP(ACTS[act], up_first).to(DEVICE, dtype)
    x = torch.randn(3, 1, 40, device=DEVICE, dtype=dtype)
    with torch.no_grad():
        y = compile_mojo(model)(x)
        assert torch.equal(y, model(x))
    assert sites() == [(f"gated_linear.{act}", "mojo.gated_linear", "torch"), ("linear", "mojo.linear", "torch")]


def test_gate_and_up_of_different_x_stay_apart():
    model = MLP(F.silu, same_x=False).to(DEVICE)
    x = torch.randn(1, 1, 40, device=DEVICE)
    with torch.no_grad():
        assert torch.equal(compile_mojo(model)(x), model(x))
    assert sorted(s[1] for s in sites()) == ["mojo.gated_act", "mojo.linear", "mojo.linear", "mojo.linear"]


@pytest.mark.skipif(not KERNEL_TARGET_OK, reason="needs CUDA or TRITON_INTERPRET=1")
@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_gated_linear_ttx(act, dtype):
    """The ttx kernel against fp64, as accurate as eager's three ops (which round gate, up, act and the product)."""
    x = torch.randn(2, 1, 1029, device=DEVICE, dtype=dtype)
    wg, wu = (torch.randn(37, 1029, device=DEVICE, dtype=dtype) / 16 for _ in range(2))
    y = mojo.gated_linear(x, wg, wu, act, "ttx")
    eager = ACTS[act](F.linear(x, wg)) * F.linear(x, wu)
    exact = ACTS[act](x.double() @ wg.double().T) * (x.double() @ wu.double().T)
    as_accurate(y, eager, exact, dtype)
    assert torch.equal(mojo.gated_linear(x, wg, wu, act, "torch"), eager)


# ------------------------------------------------------------------------------------------ linear.group (q, k, v)
class QKV(torch.nn.Module):
    def __init__(self, count=3, hidden=40, dims=(24, 8, 8)):
        super().__init__()
        self.projs = torch.nn.ModuleList(torch.nn.Linear(hidden, d, bias=False) for d in dims[:count])

    def forward(self, x):
        return [p(x) for p in self.projs]


@pytest.mark.parametrize("count", [2, 3, 4])
def test_projections_of_one_x_become_one_op(count):
    """q, k, v of one x: one mojo.linear3 (2: mojo.linear2; 4: a linear3 and a linear), eager's numbers exactly."""
    model = QKV(count, dims=(24, 8, 8, 5)).to(DEVICE, torch.bfloat16)
    x = torch.randn(1, 1, 40, device=DEVICE, dtype=torch.bfloat16)
    with torch.no_grad():
        ys = compile_mojo(model)(x)
        for y, ref in zip(ys, model(x)):
            assert torch.equal(y, ref)
    want = {2: ["mojo.linear2"], 3: ["mojo.linear3"], 4: ["mojo.linear", "mojo.linear3"]}[count]
    assert sorted(s[1] for s in sites()) == want
    assert {s[0] for s in sites() if s[1] != "mojo.linear"} == {"linear.group"}


@pytest.mark.skipif(not KERNEL_TARGET_OK, reason="needs CUDA or TRITON_INTERPRET=1")
def test_grouped_projections_on_ttx():
    model = QKV(3, hidden=1029, dims=(37, 5, 1)).to(DEVICE, torch.bfloat16)
    x = torch.randn(2, 1, 1029, device=DEVICE, dtype=torch.bfloat16)
    with torch.no_grad():
        ys = compile_mojo(model, "ttx")(x)
        refs = model(x)
    assert sites() == [("linear.group", "mojo.linear3", "ttx")]
    for y, ref, p in zip(ys, refs, model.projs):
        as_accurate(y, ref, x.double() @ p.weight.double().T, torch.bfloat16)


def test_no_group_across_a_write_or_a_dependency():
    """A projection whose weight is computed from another's output, or that reads x after an in-place write to it,
    is not moved into a group: eager's numbers."""
    wq, wk, wv = (torch.randn(6, 8, device=DEVICE) for _ in range(3))

    def dependent(x):
        q = F.linear(x, wq)
        return q, F.linear(x, wk * q.sum())  # k's weight reads q

    def written(x):
        q = F.linear(x, wq)
        x.mul_(2)
        return q, F.linear(x, wk), F.linear(x, wv)

    x = torch.randn(1, 8, device=DEVICE)
    with torch.no_grad():
        for fn in (dependent, written):
            torch._dynamo.reset()
            mojo_compile.reset_report()
            x1, x2 = x.clone(), x.clone()
            got, ref = compile_mojo(fn)(x1), fn(x2)
            assert all(torch.equal(a, b) for a, b in zip(got, ref)) and torch.equal(x1, x2)
            assert "mojo.linear3" not in [s[1] for s in sites()]


def test_disable_the_family_or_the_pass():
    model = QKV(3).to(DEVICE)
    x = torch.randn(1, 1, 40, device=DEVICE)
    with torch.no_grad():
        compile_mojo(model, disable=["linear"])(x)
        assert sites() == []
        torch._dynamo.reset()
        compile_mojo(model, disable=["linear.group"])(x)
        assert [s[1] for s in sites()] == ["mojo.linear"] * 3
    with pytest.raises(mojo_compile.OptionError):
        torch._dynamo.reset()
        compile_mojo(model, disable=["linear.grop"])(x)


def test_register_graph_pass_names_are_unique():
    from mojo_compile.patterns import PatternError, register_graph_pass

    with pytest.raises(PatternError, match="already registered"):
        register_graph_pass("linear.group", lambda gm: [])


# --------------------------------------------------------------------------------------------------------- opcheck
@pytest.mark.parametrize("target", TARGETS)
def test_opcheck(target):
    x = torch.randn(3, 1, 40, device=DEVICE, dtype=torch.bfloat16)
    w0, w1, w2 = (torch.randn(n, 40, device=DEVICE, dtype=torch.bfloat16) for n in (24, 8, 8))
    torch.library.opcheck(mojo.linear.default, (x, w0, target))
    for act in ACTS:
        torch.library.opcheck(mojo.gated_linear.default, (x, w1, w2, act, target))
    torch.library.opcheck(mojo.linear2.default, (x, w0, w1, target))
    torch.library.opcheck(mojo.linear3.default, (x, w0, w1, w2, target))


def test_bad_arguments_are_clear_errors():
    x = torch.randn(1, 8)
    with pytest.raises(ValueError, match="is not \\[N, 8\\]"):
        mojo.linear(x, torch.randn(3, 7), "torch")
    with pytest.raises(ValueError, match="act must be one of"):
        mojo.gated_linear(x, torch.randn(3, 8), torch.randn(3, 8), "relu", "torch")
    with pytest.raises(ValueError, match="differ"):
        mojo.gated_linear(x, torch.randn(3, 8), torch.randn(4, 8), "silu", "torch")


# ----------------------------------------------------------------------------------------------------- HF decode
transformers = pytest.importorskip("transformers")
COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2)
LAYERS = COMMON["num_hidden_layers"]
DECODE_COUNTS = {"mojo.linear3": LAYERS, "mojo.gated_linear": LAYERS, "mojo.linear": 2 * LAYERS + 1}  # o, down, head


def build(family, dtype):
    cfg = {"llama": lambda: transformers.LlamaConfig(**COMMON, rms_norm_eps=1e-6),
           "qwen3": lambda: transformers.Qwen3Config(**COMMON, head_dim=16, rms_norm_eps=1e-6)}[family]()
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(cfg).to(DEVICE, dtype).eval()


def decode_step(model, batch):
    """A prefill of 5 tokens (eager) into a StaticCache, then the inputs of one decode step."""
    ids = torch.randint(3, 256, (batch, 5), device=DEVICE)
    cache = transformers.StaticCache(config=model.config, max_cache_len=16)
    with torch.no_grad():
        model(input_ids=ids, past_key_values=cache, use_cache=True)
    step = dict(input_ids=torch.randint(3, 256, (batch, 1), device=DEVICE), past_key_values=cache, use_cache=True,
                cache_position=torch.tensor([5], device=DEVICE))
    return step


def run_decode(model, step, **options):
    """The decode step compiled with `options`, on a copy of the cache (each run writes its own)."""
    torch._dynamo.reset()
    mojo_compile.reset_report()
    step = dict(step, past_key_values=copy.deepcopy(step["past_key_values"]))
    with torch.no_grad():
        logits = torch.compile(model, backend="mojo", options=options)(**step).logits
    return logits, mojo_compile.last_report()


def linear_counts(report):
    counts = report.counts()
    return {op: counts[op] for op in DECODE_COUNTS if counts[op]}


@pytest.mark.parametrize("family", ["llama", "qwen3"])
@pytest.mark.parametrize("batch", [1, 3])
def test_hf_decode_step_eager_inner(family, batch):
    """The decode step of a tiny bf16 model, torch target: every projection fused (q, k, v one linear3; the MLP one
    gated_linear; o, down and the LM head linears), logits bit for bit those of the same compiled graph with the
    linear family disabled (not eager's: a compiled HF model may call attention otherwise on a GPU)."""
    model = build(family, torch.bfloat16)
    step = decode_step(model, batch)
    got, report = run_decode(model, step, inner_compiler="eager", target="torch")
    assert linear_counts(report) == DECODE_COUNTS
    assert {s.source for s in report.sites if s.op == "mojo.linear3"} == \
        {f"model.layers.{i}.self_attn" for i in range(LAYERS)}
    ref, ref_report = run_decode(model, step, inner_compiler="eager", target="torch", disable=["linear"])
    assert linear_counts(ref_report) == {}
    assert torch.equal(got, ref)


@pytest.mark.skipif(not KERNEL_TARGET_OK, reason="needs CUDA or TRITON_INTERPRET=1")
def test_hf_decode_step_ttx():
    """The same on ttx (fp32, batch 2): every linear site on ttx, logits as accurate as eager's against fp64."""
    model = build("llama", torch.float32)
    step = decode_step(model, 2)
    got, report = run_decode(model, step, inner_compiler="eager", target="ttx")
    assert linear_counts(report) == DECODE_COUNTS
    assert {s.target for s in report.sites if s.op in DECODE_COUNTS} == {"ttx"}
    ref, _ = run_decode(model, step, inner_compiler="eager", target="torch", disable=["linear"])
    exact, _ = run_decode(copy.deepcopy(model).double(), dict(step, past_key_values=_double_cache(step)),
                          inner_compiler="eager", target="torch", disable=["linear"])
    as_accurate(got, ref, exact, torch.float32)


def _double_cache(step):
    cache = copy.deepcopy(step["past_key_values"])
    for layer in cache.layers:
        layer.keys, layer.values = layer.keys.double(), layer.values.double()
    return cache


def test_hf_decode_step_inductor():
    """Default options (Inductor inner compiler; the target from the device: torch on the CPU, ttx on a GPU): the
    same sites; on the torch target the logits of the compiled graph with the family disabled, bit for bit, on ttx
    as accurate as those against fp64."""
    model = build("llama", torch.bfloat16)
    step = decode_step(model, 1)
    got, report = run_decode(model, step)
    assert linear_counts(report) == DECODE_COUNTS
    (target,) = {s.target for s in report.sites if s.op in DECODE_COUNTS}
    ref, _ = run_decode(model, step, disable=["linear"])
    if target == "torch":
        assert torch.equal(got, ref)
    else:
        exact, _ = run_decode(copy.deepcopy(model).double(), dict(step, past_key_values=_double_cache(step)),
                              inner_compiler="eager", target="torch", disable=["linear"])
        as_accurate(got, ref, exact, torch.bfloat16)
