"""The Triton decode GEMV kernels (kernels/linear.py: x @ W.T for 1..4 rows, two or three weights in one launch, and
act(x @ Wg.T) * (x @ Wu.T)) against an independent fp64 reference, as accurate as eager PyTorch. On CPU they run
under TRITON_INTERPRET=1 (see conftest.py): small shapes only."""
import itertools
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE, DTYPES, KERNEL_TARGET_OK, rel
from hopper import compile_for_hopper

from mojo_compile.kernels import linear as K
from mojo_compile.kernels.gated_act import gated_act_fwd

pytestmark = pytest.mark.skipif(not KERNEL_TARGET_OK, reason="needs CUDA or TRITON_INTERPRET=1")

ACTS = {"silu": F.silu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "gelu": F.gelu}
# (N, K): odd N (the N tail of a program's rows: 1, 3, 37) and odd K (the K tail: 5, 1000; 1029 = one full
# 1024-column step and a tail of 5)
SHAPES = [(1, 5), (3, 1000), (37, 1029), (16, 64)]
CASES = list(itertools.product(range(1, 5), SHAPES, DTYPES))
IDS = [f"m{m}-{n}x{k}-{d}" for m, (n, k), d in CASES]


def as_accurate(out, eager, exact, dtype, what=""):
    """The kernel's normwise error against fp64 at most a small multiple of eager's. Both accumulate in fp32 in
    another order and round once to the dtype. fp16 / bf16: that one rounding (about u / sqrt(3) normwise) dominates
    both errors, and the fp32 sums differ far below it (they flip a rounding only now and then): 1.25 x eager's,
    plus 2**-20 for an output where eager's rounding happens to be exact. fp32: the errors are the two sums' own, of
    one order (sqrt(K) u statistically) but not ordered: 2 x eager's plus a few fp32 ulps (4 * 2**-24)."""
    err, eager_err = rel(out, exact), rel(eager, exact)
    if dtype == torch.float32:
        assert err <= 2 * eager_err + 4 * 2.0 ** -24, (what, err, eager_err)
    else:
        assert err <= 1.25 * eager_err + 2.0 ** -20, (what, err, eager_err)


def make(*shape, dtype):
    return torch.randn(*shape, device=DEVICE).to(dtype)


@pytest.mark.parametrize("m,nk,dtype", CASES, ids=IDS)
def test_linear(m, nk, dtype):
    dtype = DTYPES[dtype]
    n, k = nk
    x, w = make(m, k, dtype=dtype), make(n, k, dtype=dtype)
    before = (x.clone(), w.clone())
    y = K.linear_fwd(x, w)
    assert torch.equal(x, before[0]) and torch.equal(w, before[1])  # inputs untouched
    assert y.shape == (m, n) and y.dtype == dtype and y.is_contiguous()
    as_accurate(y, F.linear(x, w), x.double() @ w.double().T, dtype)


@pytest.mark.parametrize("cfg", [(1, 1024, 4), (2, 1024, 4), (2, 256, 4), (4, 128, 2)])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_gpu_configs(cfg, dtype):
    """The GPU's configs (1 or 2 weight rows a program, 1024 columns a step; the interpreter runs 16-row programs by
    default) and small K steps (several steps and a K tail), 4 rows, 3-D x."""
    dtype = DTYPES[dtype]
    x, w = make(2, 2, 1029, dtype=dtype), make(37, 1029, dtype=dtype)
    y = K.linear_fwd(x, w, cfg=cfg)
    assert y.shape == (2, 2, 37)
    as_accurate(y, F.linear(x, w), x.double() @ w.double().T, dtype, cfg)


def test_strided_inputs_give_the_contiguous_results():
    """x's rows with a stride (a slice), with stride 0 (expanded from one row), x as [B, 1, K] of a wider tensor;
    weights with a row stride (row slices, every other row): bit for bit the results of contiguous copies."""
    k = 200
    base = make(4, 2 * k, dtype=torch.bfloat16)
    w_wide = make(74, k + 24, dtype=torch.bfloat16)
    xs = [base[:, :k], base[:1, :k].expand(4, k), base[:3, None, 10:10 + k], base[::2, :k]]
    ws = [w_wide[:, :k], w_wide[::2, 5:5 + k]]
    for x, w in itertools.product(xs, ws):
        assert x.stride(-1) == 1 and w.stride(-1) == 1
        y = K.linear_fwd(x, w)
        assert torch.equal(y, K.linear_fwd(x.contiguous(), w.contiguous()))
        as_accurate(y, F.linear(x, w), x.double() @ w.double().T, torch.bfloat16)


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_nan_and_inf_propagate_like_eager(dtype):
    """A NaN in x makes its row NaN, a NaN in a weight row its column; an inf in x gives inf (or NaN where it meets a
    weight of 0 or infs of both signs) where eager's does."""
    dtype = DTYPES[dtype]
    x, w = make(3, 70, dtype=dtype), make(9, 70, dtype=dtype)
    x[1, 7] = float("nan")
    w[4, 69] = float("nan")  # in the K tail of a 64-column step
    x[2, 3] = float("inf")
    w[6, 3] = 0.0
    y, ref = K.linear_fwd(x, w, cfg=(2, 64, 4)), F.linear(x, w)
    assert torch.equal(torch.isnan(y), torch.isnan(ref))
    assert torch.isnan(y[1]).all() and torch.isnan(y[:, 4]).all() and torch.isnan(y[2, 6])
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isinf(y), torch.isinf(ref)) and torch.equal(y[torch.isinf(y)], ref[torch.isinf(ref)])
    as_accurate(y[finite], ref[finite], (x.double() @ w.double().T)[finite], dtype)


@pytest.mark.parametrize("count", [2, 3])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_linears_in_one_launch(count, dtype):
    """q, k, v of one x (different N, one K) in one launch: each output is the single kernel's, bit for bit."""
    dtype = DTYPES[dtype]
    x = make(1, 3, 1029, dtype=dtype)
    ws = [make(n, 1029, dtype=dtype) for n in (37, 5, 1)[:count]]
    for cfg in (None, (2, 1024, 4)):
        ys = K.linears_fwd(x, ws, cfg=cfg)
        assert len(ys) == count
        for y, w in zip(ys, ws):
            assert y.shape == (1, 3, w.shape[0]) and y.dtype == dtype and y.is_contiguous()
            assert torch.equal(y, K.linear_fwd(x, w, cfg=cfg))
            as_accurate(y, F.linear(x, w), x.double() @ w.double().T, dtype)


# each row count with one of the odd shapes (the interpreter's time), every dtype and activation
GATED_CASES = [(m, SHAPES[m % 3], d, a) for m in range(1, 5) for d in DTYPES for a in ACTS]


@pytest.mark.parametrize("m,nk,dtype,act", GATED_CASES,
                         ids=[f"m{m}-{n}x{k}-{d}-{a}" for m, (n, k), d, a in GATED_CASES])
def test_gated_linear(m, nk, dtype, act):
    """act(x @ Wg.T) * (x @ Wu.T) with eager's roundings: the gated_act kernel (eager's roundings of act(g) * u, tested
    against eager in test_kernels_gated_act.py) applied to this kernel's own gate and up projections, bit for bit;
    and as accurate as eager's three ops against fp64."""
    dtype = DTYPES[dtype]
    n, k = nk
    x, wg, wu = make(m, k, dtype=dtype), make(n, k, dtype=dtype), make(n, k, dtype=dtype)
    y = K.gated_linear_fwd(x, wg, wu, act)
    assert y.shape == (m, n) and y.dtype == dtype and y.is_contiguous()
    cfg = K.config(n, k, m, gated=True)
    assert torch.equal(y, gated_act_fwd(K.linear_fwd(x, wg, cfg=cfg), K.linear_fwd(x, wu, cfg=cfg), act))
    eager = ACTS[act](F.linear(x, wg)) * F.linear(x, wu)
    exact = ACTS[act](x.double() @ wg.double().T) * (x.double() @ wu.double().T)
    # three roundings on the way (gate, up, act), as eager's: the same rule (module docstring of as_accurate)
    as_accurate(y, eager, exact, dtype, act)


def test_gated_linear_nan():
    """A NaN in x makes its row NaN, a NaN in the up weight its column, as eager's ops."""
    x, wg, wu = make(2, 40, dtype=torch.bfloat16), make(6, 40, dtype=torch.bfloat16), make(6, 40, dtype=torch.bfloat16)
    x[0, 3] = float("nan")
    wu[2, 39] = float("nan")
    y = K.gated_linear_fwd(x, wg, wu, "silu")
    ref = F.silu(F.linear(x, wg)) * F.linear(x, wu)
    assert torch.equal(torch.isnan(y), torch.isnan(ref)) and torch.isnan(y[0]).all() and torch.isnan(y[:, 2]).all()



KERNEL_CALLS = {
    "linear_fwd": lambda x, ws: [K.linear_fwd(x, ws[0])],
    "linears_fwd, 2": lambda x, ws: K.linears_fwd(x, ws[:2]),
    "linears_fwd, 3": lambda x, ws: K.linears_fwd(x, ws),
    "gated_linear_fwd": lambda x, ws: [K.gated_linear_fwd(x, ws[0], ws[1], "silu")],
}


def _kernel_reference(name, x, ws):
    x, ws = x.double(), [w.double() for w in ws]
    if name == "gated_linear_fwd":
        return [F.silu(x @ ws[0].T) * (x @ ws[1].T)]
    return [x @ w.T for w in ws[:{"linear_fwd": 1, "linears_fwd, 2": 2}.get(name, 3)]]


@pytest.mark.parametrize("shape", [(1, 1, 40), (2, 2, 40), (3, 40)], ids=["1x1xK", "2x2xK", "3xK"])
@pytest.mark.parametrize("name", list(KERNEL_CALLS))
def test_outputs_are_fresh_tensors(name, shape):
    """Every output is a new contiguous tensor of its own (`_base is None`), not a view of a 2-D [M, N] buffer: made
    under no_grad (a decode step), it can be written in place later in grad mode (`logits.mul_(p)`, p requiring
    grad), as eager's F.linear output can. Found by review: the launchers returned `y.view(*x.shape[:-1], N)`, and
    autograd raised "A view was created in no_grad mode and is being modified inplace with grad mode enabled"."""
    x = make(*shape, dtype=torch.float32)
    ws = [make(6, 40, dtype=torch.float32) for _ in range(3)]
    with torch.no_grad():
        ys = KERNEL_CALLS[name](x, ws)
    for y, exact in zip(ys, _kernel_reference(name, x, ws)):
        assert y._base is None and y.is_contiguous() and y.shape == exact.shape, (y.shape, exact.shape)
        assert rel(y, exact) <= 1e-5
        before = y.clone()
        p = torch.randn(6, device=DEVICE, requires_grad=True)
        y.mul_(p)  # grad mode on
        y.sum().backward()
        torch.testing.assert_close(y.detach(), before * p.detach())
        torch.testing.assert_close(p.grad, before.reshape(-1, 6).sum(0))

def test_empty_and_bad_arguments():
    x = make(2, 16, dtype=torch.float32)
    assert K.linear_fwd(x, make(0, 16, dtype=torch.float32)).shape == (2, 0)
    assert torch.equal(K.linear_fwd(make(2, 0, dtype=torch.float32), make(3, 0, dtype=torch.float32)),
                       torch.zeros(2, 3, device=DEVICE))  # K = 0: an empty sum, as eager
    with pytest.raises(ValueError, match="1 to 4 static rows"):
        K.linear_fwd(make(5, 16, dtype=torch.float32), make(3, 16, dtype=torch.float32))
    with pytest.raises(ValueError, match="1 to 4 static rows"):
        K.linear_fwd(make(0, 16, dtype=torch.float32), make(3, 16, dtype=torch.float32))
    with pytest.raises(ValueError, match="does not fit"):
        K.linear_fwd(x, make(3, 16, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="act must be one of"):
        K.gated_linear_fwd(x, make(3, 16, dtype=torch.float32), make(3, 16, dtype=torch.float32), "relu")
    with pytest.raises(ValueError, match="1 to 3 weights"):
        K.linears_fwd(x, [make(3, 16, dtype=torch.float32)] * 4)


def test_configs_are_the_measured_table(monkeypatch):
    """On a GPU, at one row: 2 weight rows a program, 1 for long rows (the down projection) and for the gated kernel
    (two weight tiles a program); 1024-column steps, fewer for a short K; 4 warps. 2-4 rows: their own configs, and
    the GEMV only for weights small enough (cuBLAS measured faster beyond: kernels/linear.py's table)."""
    monkeypatch.setattr(K, "interpreting", lambda: False)
    assert K.config(4096, 4096) == (2, 1024, 4)
    assert K.config(1024, 4096) == (2, 1024, 4)
    assert K.config(14336, 4096) == (2, 1024, 4)
    assert K.config(4096, 14336) == (1, 1024, 4)
    assert K.config(128256, 4096) == (2, 1024, 4)
    assert K.config(14336, 4096, gated=True) == (1, 1024, 4)
    assert K.config(37, 5) == (2, 16, 4)
    assert K.config(4096, 4096, 2) == (2, 512, 2) and K.config(4096, 4096, 3) == (8, 512, 2)
    assert K.gemv_reason(1, 128256 * 4096) is None
    assert K.gemv_reason(2, 4096 * 4096) is None and K.gemv_reason(3, 4096 * 4096) is None
    assert "cuBLAS is faster" in K.gemv_reason(2, 14336 * 4096)
    assert K.gemv_reason(4, 1024 * 4096) is None and "cuBLAS is faster" in K.gemv_reason(4, 4096 * 4096)


_COMPILE_BODY = r"""
from mojo_compile.kernels import linear as L

for m in range(1, 5):
    for num_w in (1, 2, 3):
        consts = dict(M=m, NUM_W=num_w, BLOCK_N=2 if num_w > 1 else 1, BLOCK_K=1024, INTERPRET=False)
        compile_kernel(L._linear_kernel, consts, {n: "bf16" for n in ("X", "W0", "W1", "W2", "Y0", "Y1", "Y2")})
    # a launch specialises an int argument equal to 1 into a constant (a weight of one row, a one-program weight)
    ones = dict(N1=1, N2=1, stride_w2=1, P1=1, P2=1)
    compile_kernel(L._linear_kernel, dict(M=m, NUM_W=3, BLOCK_N=2, BLOCK_K=1024, INTERPRET=False, **ones),
                   {n: "bf16" for n in ("X", "W0", "W1", "W2", "Y0", "Y1", "Y2")})
    for act in range(3):
        compile_kernel(L._gated_kernel, dict(M=m, ACT=act, BLOCK_N=1, BLOCK_K=1024, INTERPRET=False),
                       {n: "bf16" for n in ("X", "WG", "WU", "Y")})
"""


def test_compiles_for_hopper():
    """Every row count, weight count and activation compiles for sm_90 (tests/hopper.py)."""
    compile_for_hopper(_COMPILE_BODY, 28)


_WRITES_PROBE = r"""
import itertools, torch, triton
from triton.backends.compiler import GPUTarget


class _Sm90Driver:
    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)


triton.runtime.driver.set_active(_Sm90Driver())
from mojo_compile.kernels import linear as L
from mojo_compile.kernels.common import declared_writes, inductor_accesses, record_launches

cases = []
for m, dtype in itertools.product((1, 4), (torch.bfloat16, torch.float32)):
    x = torch.randn(m, 64).to(dtype)
    ws = [torch.randn(n, 64).to(dtype) for n in (8, 3, 5)]
    cases += [lambda x=x, ws=ws: L.linear_fwd(x, ws[0]), lambda x=x, ws=ws: L.linears_fwd(x, ws[:2]),
              lambda x=x, ws=ws: L.linears_fwd(x, ws), lambda x=x, ws=ws: L.gated_linear_fwd(x, ws[0], ws[0], "gelu")]
for case in cases:
    with record_launches() as launches:
        case()
    for kernel, _grid, bound in launches:
        read, written = inductor_accesses(kernel, bound)
        declared = declared_writes(kernel, bound)
        flags = {n: v for n, v in bound.items() if n in ("M", "NUM_W")}
        print(("OK " if written == declared else "BAD ") + kernel.fn.__name__, flags, sorted(written), sorted(declared))
"""


def test_declared_writes_match_torchs_analysis():
    """What Inductor's functionalization believes each launch writes (torch's TTIR analysis; tests/
    test_kernel_writes.py says why it matters) is what the kernel declares: Y0 only for one weight, Y0 and Y1 for
    two, all three for three; Y for the gated kernel. In a fresh process with the interpreter off."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", _WRITES_PROBE], env=env, cwd=root, capture_output=True, text=True,
                       timeout=600)
    if "No module named 'triton.backends" in r.stderr or "cannot import name 'GPUTarget'" in r.stderr:
        pytest.skip("this Triton has no compiler front end to analyse")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    lines = [line for line in r.stdout.splitlines() if line.startswith(("OK", "BAD"))]
    assert len(lines) == 16 and all(line.startswith("OK") for line in lines), "\n".join(lines)
