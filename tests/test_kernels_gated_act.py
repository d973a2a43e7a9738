"""The Triton gated-activation kernels (y = act(gate) * up, forward and backward) against an independent fp64
reference and against eager PyTorch, whose roundings they must reproduce. On CPU they run under TRITON_INTERPRET=1
(see conftest.py)."""
import itertools

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE, DTYPES, KERNEL_TARGET_OK, rel
from hopper import compile_for_hopper

from mojo_compile.kernels import gated_act as gated_act_kernels
from mojo_compile.kernels.gated_act import gated_act_bwd, gated_act_fused_bwd, gated_act_fused_fwd, gated_act_fwd

pytestmark = pytest.mark.skipif(not KERNEL_TARGET_OK, reason="needs CUDA or TRITON_INTERPRET=1")

ACTS = {"silu": F.silu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "gelu": F.gelu}
# Normwise relative error allowed against fp64: two unit roundoffs (the rounding of act(gate) and that of the
# product; in the backward, of dy * up and of the result), a few fp32 ulps for fp32.
TOL = {torch.bfloat16: 2 * 2.0 ** -8, torch.float16: 2 * 2.0 ** -11, torch.float32: 4 * 2.0 ** -24}
# Where the kernels run on CPU (the interpreter), exp/erf/tanh are numpy's and Python's, not the vectorised ones of
# torch's CPU kernels, so the fp32 activation may differ in its last bits: by <= DELTA * (1 + |gate|), times the
# incoming gradient in the backward (measured: <= 2.6 * 2**-23 * (1 + |gate|) on 2e5 samples). Eager and kernel may
# then round an element differently only where eager's fp32 value lies within that distance of a rounding tie of
# the dtype; everywhere else they must agree bit for bit. On CUDA the kernels use libdevice's exp and tanh, as torch
# does: bit for bit everywhere; but Triton's libdevice erff is not the one torch was built with (see gated_act.py), so
# "gelu" gets the same tie carve-out there.
DELTA = 2.0 ** -20

SHAPES = [(1, 96), (5, 1000), (3, 2, 11008)]  # ragged widths; 3D leading dims; small enough for the interpreter
# two contiguous tensors (separate gate / up projections: the flat kernels), two chunk views (2-D tiles), or the
# fused [..., 2I] tensor either way round
FORMS = ["separate", "pair", "gate_first", "gate_second"]
CASES = list(itertools.product(SHAPES, DTYPES, ACTS))
IDS = ["x".join(map(str, s)) + f"-{d}-{a}" for s, d, a in CASES]


def make(shape, dtype):
    """A contiguous gate_up projection output [..., 2I]: gate values over the activations' interesting range."""
    gu = torch.randn(*shape[:-1], 2 * shape[-1], device=DEVICE) * 2
    return gu.to(dtype)


def halves(gu, form):
    first, second = gu.chunk(2, -1)  # strided views (row stride 2I), as the fused projection hands them over
    if form == "separate":
        return first.contiguous(), second.contiguous()
    return (second, first) if form == "gate_second" else (first, second)


def is_pair(form):
    return form in ("separate", "pair")


def assert_eager_rounding(out, ref, pre32, delta, act):
    """out == ref (eager, same dtype) bit for bit, except where the two fp32 activations may differ in their last
    bits (see DELTA) and eager's pre-rounding fp32 value `pre32` is within `delta` of a rounding tie: those elements
    are left to the fp64 check."""
    if DEVICE == "cuda" and act != "gelu":
        assert torch.equal(out, ref), (out != ref).sum().item()
        return
    near = (pre32 + delta).to(out.dtype) != (pre32 - delta).to(out.dtype)
    assert near.float().mean().item() < 0.2, near.float().mean().item()  # the bit-exact check covers most elements
    assert torch.equal(out[~near], ref[~near]), (out[~near] != ref[~near]).sum().item()


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("shape,dtype,act", CASES, ids=IDS)
def test_forward(shape, dtype, act, form):
    dtype = DTYPES[dtype]
    gu = make(shape, dtype)
    before = gu.clone()
    gate, up = halves(gu, form)
    y = gated_act_fwd(gate, up, act) if is_pair(form) else gated_act_fused_fwd(gu, act, form == "gate_first")
    assert torch.equal(gu, before)  # inputs untouched
    assert y.shape == gate.shape and y.dtype == dtype and y.is_contiguous()

    exact = ACTS[act](gate.double()) * up.double()
    assert rel(y, exact) <= TOL[dtype], rel(y, exact)
    if dtype != torch.float32:
        a32 = ACTS[act](gate.float())  # eager computes act in fp32 and rounds it to the dtype before the product
        assert_eager_rounding(y, ACTS[act](gate) * up, a32, DELTA * (1 + gate.float().abs()), act)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("shape,dtype,act", CASES, ids=IDS)
def test_backward(shape, dtype, act, form):
    dtype = DTYPES[dtype]
    gu = make(shape, dtype)
    gate, up = halves(gu, form)
    dy = torch.randn(gate.shape, device=DEVICE).to(dtype)
    before = (gu.clone(), dy.clone())
    if is_pair(form):
        dg, du = gated_act_bwd(dy, gate, up, act)
        assert dg.is_contiguous() and du.is_contiguous() and dg.shape == du.shape == gate.shape
    else:
        dgu = gated_act_fused_bwd(dy, gu, act, form == "gate_first")
        assert dgu.shape == gu.shape and dgu.dtype == dtype and dgu.is_contiguous()
        dg, du = halves(dgu, form)
    assert torch.equal(gu, before[0]) and torch.equal(dy, before[1])
    assert dg.dtype == du.dtype == dtype

    leaves64 = [t.detach().double().requires_grad_() for t in (gate, up)]
    grads64 = torch.autograd.grad(ACTS[act](leaves64[0]) * leaves64[1], leaves64, dy.double())
    for g, g64, name in zip((dg, du), grads64, ("gate", "up")):
        assert rel(g, g64) <= TOL[dtype], (name, rel(g, g64))
    if dtype != torch.float32:
        leaves = [t.detach().requires_grad_() for t in (gate, up)]
        dg_ref, du_ref = torch.autograd.grad(ACTS[act](leaves[0]) * leaves[1], leaves, dy)
        a32 = ACTS[act](gate.float())  # d_up = round(dy * round(a32)): the forward's tie question
        assert_eager_rounding(du, du_ref, a32, DELTA * (1 + gate.float().abs()), act)
        da = (dy * up).float()  # eager rounds dy * up to the dtype, then its act backward works in fp32
        if act == "silu":
            dg32 = torch.ops.aten.silu_backward(da, gate.float())
        else:
            dg32 = torch.ops.aten.gelu_backward(da, gate.float(), approximate="tanh" if act == "gelu_tanh" else "none")
        assert_eager_rounding(dg, dg_ref, dg32, DELTA * da.abs() * (1 + gate.float().abs()), act)


@pytest.mark.parametrize("layout", ["chosen", "tiles"])
@pytest.mark.parametrize("act", list(ACTS))
def test_multi_tile_configs(act, layout, monkeypatch):
    """Small tiles give the default's results bit for bit, in every layout: the flat ones with a ragged last range
    (contiguous tensors; strided halves split by their width) and -- forced here, chosen only for symbolic widths
    or huge tensors -- the 2-D grid with ragged row and column blocks."""
    gu = make((19, 1000), torch.bfloat16)
    gate, up = halves(gu, "gate_first")
    dy = torch.randn(gate.shape, device=DEVICE).to(torch.bfloat16)
    y0, (dg0, du0), dgu0 = (gated_act_fwd(gate, up, act), gated_act_bwd(dy, gate, up, act),
                            gated_act_fused_bwd(dy, gu, act, True))
    assert torch.equal(dgu0, torch.cat([dg0, du0], -1))
    if layout == "tiles":
        monkeypatch.setattr(gated_act_kernels, "_layout", lambda *args: gated_act_kernels.TILES)
    for config in [None, (4, 256, 4), (8, 512, 2)]:
        assert torch.equal(gated_act_fused_fwd(gu, act, True, config=config), y0)
        dg, du = gated_act_bwd(dy, gate, up, act, config=config)
        assert torch.equal(dg, dg0) and torch.equal(du, du0)
        assert torch.equal(gated_act_fused_bwd(dy, gu, act, True, config=config), dgu0)
        g_c, u_c, dy_c = gate.contiguous(), up.contiguous(), dy.contiguous()
        assert torch.equal(gated_act_fwd(g_c, u_c, act, config=config), y0)
        dg, du = gated_act_bwd(dy_c, g_c, u_c, act, config=config)
        assert torch.equal(dg, dg0) and torch.equal(du, du0)


def test_layout_choice():
    """Contiguous tensors run flat; the strided halves of gate_up flat by their static width; 2-D tiles otherwise."""
    gu = make((6, 40), torch.bfloat16)
    gate, up = halves(gu, "gate_first")
    layout = gated_act_kernels._layout
    assert layout(6, 40, gate.contiguous(), up.contiguous()) == gated_act_kernels.FLAT_CONTIGUOUS
    assert layout(6, 40, gate, up) == gated_act_kernels.FLAT_ROWS
    assert layout(2**22, 2**10, gate, up) == gated_act_kernels.TILES  # the flat index would pass int32


def test_other_layouts():
    """A gate whose last dim is strided (copied: the kernel wants unit column stride), an up with a row stride
    and an expanded grad (row stride 0): the results match contiguous inputs bit for bit."""
    gate = torch.randn(300, 24, device=DEVICE).to(torch.bfloat16).t()  # [24, 300], strides (1, 24)
    up = torch.randn(48, 300, device=DEVICE).to(torch.bfloat16)[::2]  # [24, 300], strides (600, 1)
    dy = torch.randn(1, 300, device=DEVICE).to(torch.bfloat16).expand(24, 300)
    y = gated_act_fwd(gate, up, "silu")
    assert torch.equal(y, gated_act_fwd(gate.contiguous(), up.contiguous(), "silu"))
    dg, du = gated_act_bwd(dy, gate, up, "silu")
    dg_c, du_c = gated_act_bwd(dy.contiguous(), gate.contiguous(), up.contiguous(), "silu")
    assert torch.equal(dg, dg_c) and torch.equal(du, du_c)


def test_empty_rows():
    gu = torch.randn(0, 3, 128, device=DEVICE, dtype=torch.bfloat16)
    gate, up = gu.chunk(2, -1)
    assert gated_act_fwd(gate, up, "silu").shape == (0, 3, 64)
    assert gated_act_fused_fwd(gu, "gelu", False).shape == (0, 3, 64)
    dg, du = gated_act_bwd(torch.empty_like(gate), gate, up, "silu")
    assert dg.shape == du.shape == (0, 3, 64)
    assert gated_act_fused_bwd(torch.empty_like(gate), gu, "gelu_tanh", True).shape == (0, 3, 128)


def test_bad_arguments():
    gu = torch.randn(4, 10, device=DEVICE)
    with pytest.raises(ValueError):
        gated_act_fused_fwd(gu, "relu", True)
    with pytest.raises(ValueError):
        gated_act_fused_fwd(gu[:, :9], "silu", True)  # odd width
    with pytest.raises(ValueError):
        gated_act_fwd(gu[:, :5], gu[:, 5:].half(), "silu")  # dtype mismatch


_COMPILE_BODY = r"""
from mojo_compile.kernels import gated_act as G

for act in G.ACT_CODES.values():
    for layout in (G.TILES, G.FLAT_CONTIGUOUS, G.FLAT_ROWS):
        consts = dict(ACT=act, LAYOUT=layout, WIDTH=11008 if layout == G.FLAT_ROWS else 0, BLOCK_M=2, BLOCK_N=1024,
                      INTERPRET=False, PERSISTENT=False)
        compile_kernel(G._fwd_kernel, consts, dict(G="bf16", U="bf16", Y="bf16"))
        compile_kernel(G._bwd_kernel, dict(consts, FUSED=layout == G.FLAT_ROWS),
                       {n: "bf16" for n in ("DY", "G", "U", "DG", "DU")})
"""


def test_compiles_for_hopper():
    """Forward and backward compile for sm_90 (tests/hopper.py) for every activation (libdevice exp / tanh / erf)
    in every layout."""
    compile_for_hopper(_COMPILE_BODY, 18)
