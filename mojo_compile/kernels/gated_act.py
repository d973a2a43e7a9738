"""Triton kernels for the gated MLP activation y = act(gate) * up (SwiGLU, GeGLU), forward and backward, plus their
launchers. act is "silu", "gelu_tanh" (F.gelu(approximate="tanh")) or "gelu" (exact, erf).

Layout: gate, up and every output are viewed as rows [M, I] with a row stride each and unit column stride, so the
two halves of a fused gate_up projection output [M, 2I] are read (and their gradients written) in place, without
copies or a torch.cat. Programs take flat ranges of the [M, I] elements, or 2-D tiles where the width is symbolic
(see _tile): no masked tail per row, and short rows still give each program enough bytes to move: the kernels are
memory bound.

Numerics reproduce eager PyTorch, which computes act in fp32 and rounds it to the input dtype before the product:
a = round(act(g)), y = round(a * u). The backward follows eager autograd of that expression: d_a = round(dy * u),
d_u = round(dy * a), d_g = round(act'(g) applied to d_a) with torch's own formulas (ATen's Activation kernels),
operation for operation. Every load is cast to fp32 at once and all math is fp32, which also keeps the kernels right
under TRITON_INTERPRET=1 (whose bf16 arithmetic is wrong); `_round` rounds to nearest even there too.

Transcendentals: on the GPU exp and tanh come from libdevice and the divisions are IEEE (div_rn), as in torch's CUDA
kernels (expf, tanhf, '/'): Triton's tl.exp and '/' are approximate, and a last-bit difference in fp32 flips a
bf16/fp16 rounding now and then. FMA contraction stays on, as in nvcc's build of torch. With that, "silu" and
"gelu_tanh" match eager CUDA bit for bit (H200, torch 2.11+cu130, Triton 3.6: 0 differences in 16M elements per dtype,
forward and backward). "gelu" does not: erf is libdevice's __nv_erff either way, but Triton bundles its own
libdevice, whose erff differs from CUDA 13's (which torch was built with) by one ulp on ~13% of inputs; such last-bit
differences flip a rounding of act(g) on ~1% of elements. (Linking CUDA 13's libdevice instead, extern_libs=
{"libdevice": ".../nvvm/libdevice/libdevice.10.bc"}, matched torch's erf exactly in a test, but ties the build to the
toolkit.) The interpreter has no libdevice: numpy's exp, Python's erf and a tanh built from exp in fp64.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .common import (ACT_CODES, device_caps, expf, gated_activation, interpreting, round_to, rows, tanhf, wrap_triton,
                     writes)

# torch's constants as its kernels hold them, in fp32 (the literals below are exact fp32 values; module-level
# constexpr floats misbehave in the interpreter):
#   0.7978845834732056   kBeta = sqrt(2/pi)            0.044714998453855515  kKappa
#   0.13414499163627625  3.0f * kKappa (a float product, not fp32(3 * 0.044715))
#   0.7071067690849304   kAlpha = M_SQRT1_2            0.3989422917366028    1/sqrt(2 pi) (gelu backward)


# ----------------------------------------------------------------------------------------------------------- helpers
@triton.jit
def _act_grad(da, g, ACT: tl.constexpr, INTERPRET: tl.constexpr):
    """da * act'(g) in fp32: silu_backward / gelu_backward as ATen computes them."""
    if ACT == 0:
        s = tl.math.div_rn(1.0, 1.0 + expf(-g, INTERPRET))
        return da * s * (1.0 + g * (1.0 - s))
    elif ACT == 1:
        g_sq = g * g
        t = tanhf(0.7978845834732056 * (g + 0.044714998453855515 * (g_sq * g)), INTERPRET)
        left_derivative = 0.5 * (1.0 + t)
        right_derivative = (0.5 * g) * (1.0 - t * t) * (0.7978845834732056 * (1.0 + 0.13414499163627625 * g_sq))
        return da * (left_derivative + right_derivative)
    else:
        cdf = 0.5 * (1.0 + tl.math.erf(g * 0.7071067690849304))
        pdf = expf(-0.5 * g * g, INTERPRET) * 0.3989422917366028
        return da * (cdf + g * pdf)


@triton.jit
def _num_tiles(M, N, numel, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, LAYOUT: tl.constexpr):
    if LAYOUT == 0:
        return tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    return tl.cdiv(numel, BLOCK_M * BLOCK_N)


@triton.jit
def _tile(task, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, M, N, numel, LAYOUT: tl.constexpr,
          WIDTH: tl.constexpr):
    """Tile `task`'s (rows, cols, mask); element offsets are rows * row_stride + cols. Flat layouts take one range
    of BLOCK_M * BLOCK_N elements of the row-major [M, N] (no masked tail per row):
      FLAT_CONTIGUOUS  every tensor is contiguous: rows = 0, cols = the flat index -- one add per address;
      FLAT_ROWS        strided rows (the halves of gate_up): row and column from the flat index by the compile-time
                       WIDTH = N (a multiply-shift, int32: numel < 2**31);
      TILES            2-D tiles of a 1-D grid, column blocks fastest (any size, any stride)."""
    if LAYOUT == 1:
        # tl.cast: task is an int in the interpreter's persistent loop
        i = tl.cast(task, tl.int64) * (BLOCK_M * BLOCK_N) + tl.arange(0, BLOCK_M * BLOCK_N)
        return 0, i, i < numel
    elif LAYOUT == 2:
        i = task * (BLOCK_M * BLOCK_N) + tl.arange(0, BLOCK_M * BLOCK_N)
        rows = i // WIDTH
        return rows.to(tl.int64), i - rows * WIDTH, i < numel
    else:
        col_blocks = tl.cdiv(N, BLOCK_N)
        rows = ((task // col_blocks) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
        cols = (task % col_blocks) * BLOCK_N + tl.arange(0, BLOCK_N)
        return rows[:, None], cols[None, :], (rows < M)[:, None] & (cols < N)[None, :]


# ----------------------------------------------------------------------------------------------------------- kernels
# One tile a program, or (PERSISTENT: one program per core) every num_programs-th tile.
@writes("Y")
@triton.jit
def _fwd_kernel(G, U, Y, M, N, numel, stride_g, stride_u, stride_y, ACT: tl.constexpr, LAYOUT: tl.constexpr,
                WIDTH: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, INTERPRET: tl.constexpr,
                PERSISTENT: tl.constexpr):
    if PERSISTENT:
        for task in range(tl.program_id(0), _num_tiles(M, N, numel, BLOCK_M, BLOCK_N, LAYOUT), tl.num_programs(0)):
            _fwd_tile(task, G, U, Y, M, N, numel, stride_g, stride_u, stride_y, ACT, LAYOUT, WIDTH, BLOCK_M,
                      BLOCK_N, INTERPRET)
    else:
        _fwd_tile(tl.program_id(0), G, U, Y, M, N, numel, stride_g, stride_u, stride_y, ACT, LAYOUT, WIDTH, BLOCK_M,
                  BLOCK_N, INTERPRET)


@triton.jit
def _fwd_tile(task, G, U, Y, M, N, numel, stride_g, stride_u, stride_y, ACT: tl.constexpr, LAYOUT: tl.constexpr,
              WIDTH: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, INTERPRET: tl.constexpr):
    rows, cols, mask = _tile(task, BLOCK_M, BLOCK_N, M, N, numel, LAYOUT, WIDTH)
    g = tl.load(G + rows * stride_g + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(U + rows * stride_u + cols, mask=mask, other=0.0).to(tl.float32)
    dtype = Y.dtype.element_ty
    # eager materialises act(g) in the dtype
    a = round_to(gated_activation(g, ACT, INTERPRET), dtype, INTERPRET).to(tl.float32)
    tl.store(Y + rows * stride_y + cols, round_to(a * u, dtype, INTERPRET), mask=mask)


@writes("DG", DU=lambda a: not a["FUSED"])
@triton.jit
def _bwd_kernel(DY, G, U, DG, DU, M, N, numel, stride_dy, stride_g, stride_u, stride_dg, stride_du, DG_OFF, DU_OFF,
                ACT: tl.constexpr, FUSED: tl.constexpr, LAYOUT: tl.constexpr, WIDTH: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, INTERPRET: tl.constexpr, PERSISTENT: tl.constexpr):
    """FUSED: both gradients go into DG, the [M, 2I] gradient of gate_up, at column offsets DG_OFF and DU_OFF (DU is
    not written). One output tensor, not two views of it: a traced launch that writes views of one tensor gets
    them cloned and scattered back by functionalization."""
    if PERSISTENT:
        for task in range(tl.program_id(0), _num_tiles(M, N, numel, BLOCK_M, BLOCK_N, LAYOUT), tl.num_programs(0)):
            _bwd_tile(task, DY, G, U, DG, DU, M, N, numel, stride_dy, stride_g, stride_u, stride_dg, stride_du,
                      DG_OFF, DU_OFF, ACT, FUSED, LAYOUT, WIDTH, BLOCK_M, BLOCK_N, INTERPRET)
    else:
        _bwd_tile(tl.program_id(0), DY, G, U, DG, DU, M, N, numel, stride_dy, stride_g, stride_u, stride_dg,
                  stride_du, DG_OFF, DU_OFF, ACT, FUSED, LAYOUT, WIDTH, BLOCK_M, BLOCK_N, INTERPRET)


@triton.jit
def _bwd_tile(task, DY, G, U, DG, DU, M, N, numel, stride_dy, stride_g, stride_u, stride_dg, stride_du, DG_OFF,
              DU_OFF, ACT: tl.constexpr, FUSED: tl.constexpr, LAYOUT: tl.constexpr, WIDTH: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, INTERPRET: tl.constexpr):
    rows, cols, mask = _tile(task, BLOCK_M, BLOCK_N, M, N, numel, LAYOUT, WIDTH)
    dy = tl.load(DY + rows * stride_dy + cols, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(G + rows * stride_g + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(U + rows * stride_u + cols, mask=mask, other=0.0).to(tl.float32)
    dtype = DG.dtype.element_ty
    # recomputed: nothing saved but g and u
    a = round_to(gated_activation(g, ACT, INTERPRET), dtype, INTERPRET).to(tl.float32)
    du = round_to(dy * a, dtype, INTERPRET)
    if FUSED:
        tl.store(DG + DU_OFF + rows * stride_dg + cols, du, mask=mask)
    else:
        tl.store(DU + rows * stride_du + cols, du, mask=mask)
    da = round_to(dy * u, dtype, INTERPRET).to(tl.float32)  # eager's mul backward rounds before the act backward
    tl.store(DG + DG_OFF + rows * stride_dg + cols, round_to(_act_grad(da, g, ACT, INTERPRET), dtype, INTERPRET),
             mask=mask)


# --------------------------------------------------------------------------------------------------------- launchers
def _config(n_cols: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps) for rows of n_cols. GPU: 2048-element tiles (flat layouts: one range of 2048;
    TILES: two row pieces of 1024, more rows when rows are shorter), 4 warps, i.e. 16 elements per thread and
    tensor: enough loads in flight to hide the exact expf / IEEE division. H200, bf16 [16384, 11008] silu forward:
    FLAT_CONTIGUOUS 245.8 us (1024-element ranges: 261.6), FLAT_ROWS on the halves of gate_up 247.4, TILES 2 x 1024
    259-260 (1 x 1024: 277); backward TILES 2 x 1024 428 us (scratch experiments, benchmarks/sweep_mlp_rope.py).
    Short rows (I = 96, 1000) reached only 1.2-2.5 TB/s as TILES. Interpreter: few big programs (~1 ms each)."""
    block_n = triton.next_power_of_2(max(n_cols, 1))
    if interpreting():
        block_n = min(block_n, 16384)
        return max(1, 32768 // block_n), block_n, 4
    block_n = min(block_n, 1024)
    return (2 if block_n == 1024 else 4096 // block_n), block_n, 4


def _rows(t: torch.Tensor) -> torch.Tensor:
    """[..., I] as [M, I] with unit column stride: a view when the leading dims merge (chunk halves do)."""
    t2 = rows(t)
    return t2 if t2.stride(1) == 1 else t2.contiguous()


def _check(act: str, *ts: torch.Tensor) -> None:
    if act not in ACT_CODES:
        raise ValueError(f"gated_act: act must be one of {tuple(ACT_CODES)}, got {act!r}")
    if any(t.shape != ts[0].shape or t.dtype != ts[0].dtype for t in ts):
        raise ValueError(f"gated_act: shape/dtype mismatch {[(tuple(t.shape), t.dtype) for t in ts]}")


def _split(gu: torch.Tensor, gate_first: bool) -> tuple[torch.Tensor, torch.Tensor]:
    if gu.shape[-1] % 2:
        raise ValueError(f"gated_act: the fused gate_up dim must be even, got {gu.shape[-1]}")
    first, second = gu.chunk(2, -1)
    return (first, second) if gate_first else (second, first)


TILES, FLAT_CONTIGUOUS, FLAT_ROWS = 0, 1, 2  # see _tile


def _layout(m, n, *ts) -> int:
    """FLAT_CONTIGUOUS if every [m, n] view has row stride n, else FLAT_ROWS if n is static and the flat index fits
    int32, else TILES. Decided only on what is provable: no guard is added for symbolic sizes."""
    if all(statically_known_true(t.stride(0) == n) for t in ts):
        return FLAT_CONTIGUOUS
    if isinstance(n, int) and statically_known_true(m * n < 2**31 - 2**20):
        return FLAT_ROWS
    return TILES


def _launch(kernel, m, n, tensors, strides, config, **flags):
    block_m, block_n, num_warps = config or _config(n)
    caps = device_caps(tensors[0].device)
    layout = _layout(m, n, *tensors)
    if layout == FLAT_ROWS and not caps.vector_gathers:  # its row / column division: scalar loads there
        layout = TILES
    tiles = (triton.cdiv(m * n, block_m * block_n) if layout != TILES
             else triton.cdiv(m, block_m) * triton.cdiv(n, block_n))
    wrap_triton(kernel)[(caps.programs(tiles),)](*tensors, m, n, m * n, *strides, **flags, LAYOUT=layout,
                                                 WIDTH=n if layout == FLAT_ROWS else 0, BLOCK_M=block_m,
                                                 BLOCK_N=block_n, INTERPRET=interpreting(),
                                                 PERSISTENT=caps.persistent, num_warps=num_warps)


def _launch_fwd(g, u, y, act, config):
    """g, u, y: [M, I] views with unit column stride."""
    m, n = g.shape
    if m == 0 or n == 0:  # M may be symbolic: dynamo specialises 0 and 1, so this adds no guard for M >= 2
        return
    _launch(_fwd_kernel, m, n, (g, u, y), (g.stride(0), u.stride(0), y.stride(0)), config, ACT=ACT_CODES[act])


def _launch_bwd(dy, g, u, dg, du, act, config, offsets=None):
    """offsets = (dg, du) column offsets: both gradients go into dg (the fused form; du unused)."""
    m, n = g.shape
    if m == 0 or n == 0:
        return
    fused = offsets is not None
    du = dy if fused else du
    dg_off, du_off = offsets if fused else (0, 0)
    strides = (dy.stride(0), g.stride(0), u.stride(0), dg.stride(0), du.stride(0), dg_off, du_off)
    _launch(_bwd_kernel, m, n, (dy, g, u, dg, du), strides, config, ACT=ACT_CODES[act], FUSED=fused)


def gated_act_fwd(gate, up, act, config=None):
    """y = act(gate) * up, a new contiguous tensor shaped and typed like gate. gate and up may be strided views
    (unit stride in the last dim is what avoids a copy). `config` = (BLOCK_M, BLOCK_N, num_warps) overrides."""
    _check(act, gate, up)
    g, u = _rows(gate), _rows(up)
    y = torch.empty(gate.shape, dtype=gate.dtype, device=gate.device)  # not a view: the caller may write it
    _launch_fwd(g, u, y.view(g.shape), act, config)
    return y


def gated_act_fused_fwd(gu, act, gate_first, config=None):
    """gu = [..., 2I], the fused gate_up projection output, gate its first half when gate_first. Returns y [..., I]."""
    gate, up = _split(gu, gate_first)
    return gated_act_fwd(gate, up, act, config)


def gated_act_bwd(grad_y, gate, up, act, config=None):
    """(grad_gate, grad_up) of y = act(gate) * up, new contiguous tensors shaped and typed like gate."""
    _check(act, grad_y, gate, up)
    dy, g, u = _rows(grad_y), _rows(gate), _rows(up)
    dg = torch.empty(g.shape, dtype=gate.dtype, device=gate.device)
    du = torch.empty(g.shape, dtype=gate.dtype, device=gate.device)
    _launch_bwd(dy, g, u, dg, du, act, config)
    return dg.view(gate.shape), du.view(up.shape)


def gated_act_fused_bwd(grad_y, gu, act, gate_first, config=None):
    """grad of gu [..., 2I] (contiguous): the kernel writes both halves of one [M, 2I] tensor, no torch.cat."""
    gate, up = _split(gu, gate_first)
    _check(act, grad_y, gate, up)
    dy, g, u = _rows(grad_y), _rows(gate), _rows(up)
    half = g.shape[1]
    grad_gu = torch.empty((g.shape[0], 2 * half), dtype=gu.dtype, device=gu.device)
    _launch_bwd(dy, g, u, grad_gu, None, act, config, offsets=(0, half) if gate_first else (half, 0))
    return grad_gu.view(gu.shape)
