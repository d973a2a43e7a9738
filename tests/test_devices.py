"""The device capability table (lowering/devices.py) and the launch configs the kernels plan from it.

- Every launcher over model shapes (kernels/launch_cases.py, meta tensors, launches recorded, not run), planned
  for the H200 and for Ascend 910B: the grid is within the device's limit; on Ascend (persistent) it is at most one
  program per core; a program's largest fp32 tile fits the on-chip buffer.
- The persistent loops (one program per core, each taking every num_programs-th tile) compute what one tile a
  program computes: every kernel in the interpreter, planned for a persistent stand-in of 3 vector / 2 AI cores,
  against the same launcher planned for the interpreter's one-tile-a-program grids."""
import dataclasses
import math

import pytest
import torch

from conftest import DEVICE, KERNEL_TARGET_OK, interpreter_loops_from_a_program_id
from mojo_compile.kernels import common, launch_cases
from mojo_compile.lowering import devices
from mojo_compile.lowering.devices import DEVICES, assume, device_caps


def test_known_devices():
    h200, ascend = DEVICES["H200"], DEVICES["Ascend910B3"]
    assert (h200.vector_cores, h200.persistent, h200.dot_precision(exact=False)) == (132, False, "tf32")
    assert (ascend.max_programs, ascend.persistent, ascend.onchip_bytes) == (65535, True, 192 * 1024)
    assert ascend.dot_precision(exact=False) == "ieee" and "tf32" not in ascend.dot_precisions  # tf32 asserts
    assert all(caps.dot_precision(exact=True) == "ieee" for caps in DEVICES.values())


def test_programs_cap_at_the_cores_only_on_a_persistent_device():
    h200, ascend = DEVICES["H200"], DEVICES["Ascend910B2"]
    assert h200.programs(10 ** 6) == 10 ** 6
    assert ascend.programs(10 ** 6) == 48 and ascend.programs(10 ** 6, matrix=True) == 24
    assert ascend.programs(5) == 5 and ascend.programs(0) == 1


def test_assume_nests_and_restores():
    cpu = torch.device("cpu")
    assert device_caps(cpu) is DEVICES["interpreter"]
    with assume("H200"):
        with assume("Ascend910B3") as inner:
            assert device_caps(cpu) is inner
        assert device_caps(cpu) is DEVICES["H200"]
    assert devices.assumed() is None


# ------------------------------------------------------------------------------------------------ launch configs
# The largest tile a program holds, in elements: (kernel name) -> its tile shapes from the launch's BLOCK_* sizes.
TILES = {
    "_fwd_rows_kernel": lambda a: [a["BLOCK_M"] * a["BLOCK_N"]],
    "_fwd_loop_kernel": lambda a: [a["BLOCK_N"]],
    "_bwd_rows_kernel": lambda a: [a["BLOCK_M"] * a["BLOCK_N"]],
    "_bwd_loop_kernel": lambda a: [a["BLOCK_N"]],
    # (PAIR_TILES: BLOCK_D is the pairs' block, BLOCK_PASS that of the columns that do not rotate)
    "_rope_kernel": lambda a: [a["BLOCK_T"] * max(a["BLOCK_HQ"], a["BLOCK_HK"]) * max(a["BLOCK_D"], a["BLOCK_PASS"])],
    "_norm_rope_fwd_kernel": lambda a: [a["BLOCK_T"] * max(a["BLOCK_HQ"], a["BLOCK_HK"])
                                        * max(a["BLOCK_D"], a["BLOCK_PASS"])],
    "_norm_rope_bwd_kernel": lambda a: [a["BLOCK_T"] * max(a["BLOCK_HQ"], a["BLOCK_HK"])
                                        * max(a["BLOCK_D"], a["BLOCK_PASS"])],
    "_split_kernel": lambda a: [a["BLOCK_M"] * a["BLOCK_N"], a["BLOCK_N"] * a["BLOCK_D"]],
    "_merge_kernel": lambda a: [a["BLOCK_R"] * a["BLOCK_S"] * a["BLOCK_D"]],
}
# What a kernel with loads pipelined over its loop (NUM_STAGES > 1) keeps NUM_STAGES blocks of in shared memory:
# (kernel) -> the pointers it streams, given the launch's flags.
STREAMED = {
    ("layer_norm", "_bwd_kernel"): lambda a: ["X", "DY"] + (["DRES"] if a["HAS_DRES"] else []),
    ("layer_norm", "_fwd_kernel"): lambda a: ["X"] + (["R"] if a["HAS_RES"] else []),
}
# The kernels with tl.dot: planned per AI core on Ascend.
MATRIX_KERNELS = {("attention", "_fwd_kernel"), ("attention", "_bwd_dq_kernel"), ("attention", "_bwd_dkdv_kernel"),
                  ("attention_decode", "_split_kernel")}


def _tile_elements(name, module, a) -> int:
    if name in TILES:
        return max(TILES[name](a))
    if module == "attention":  # the scores and the q / k / v / accumulator tiles
        return max(a["BLOCK_M"] * a["BLOCK_N"], max(a["BLOCK_M"], a["BLOCK_N"]) * a["BLOCK_D"])
    if module == "cross_entropy":
        return a["BLOCK_V"]
    return a["BLOCK_M"] * a["BLOCK_N"]  # gated_act, layer_norm


@pytest.fixture
def planning_for_a_device(monkeypatch):
    """The launchers plan as on a device, not for the interpreter (whose configs are few big programs)."""
    for module in (common, *launch_cases.KERNEL_MODULES):
        monkeypatch.setattr(module, "interpreting", lambda: False)


@pytest.mark.parametrize("name", ["H200", "Ascend910B3", "Ascend910B2"])
def test_launch_configs_fit_the_device(name, planning_for_a_device):
    caps = DEVICES[name]
    launches = 0
    with assume(caps):
        for case, thunk in launch_cases.cases("meta"):
            with common.record_launches() as recorded:
                thunk()
            assert recorded, case
            for kernel, grid, args in recorded:
                launches += 1
                module = kernel.fn.__module__.rsplit(".", 1)[-1]
                what = f"{case}: {kernel.fn.__name__} grid {grid}"
                assert len(grid) == 1 or all(g <= 65535 for g in grid[1:]), what
                assert math.prod(grid) <= caps.max_programs, what
                if caps.persistent:
                    cores = caps.matrix_cores if (module, kernel.fn.__name__) in MATRIX_KERNELS else caps.vector_cores
                    assert len(grid) == 1 and grid[0] <= cores, what
                    assert args.get("PERSISTENT", True), what  # (the backward norms are persistent as written)
                elif "PERSISTENT" in args:
                    assert not args["PERSISTENT"], what
                assert _tile_elements(kernel.fn.__name__, module, args) * 4 <= caps.onchip_bytes, what
                if args.get("NUM_STAGES", 1) > 1:  # the pipeline's buffers, with room left for the reductions
                    streamed = STREAMED[module, kernel.fn.__name__](args)
                    stage = args["BLOCK_M"] * args["BLOCK_N"] * sum(args[p].element_size() for p in streamed)
                    assert args["NUM_STAGES"] * stage <= caps.onchip_bytes - common.PIPELINE_RESERVE, what
    assert launches > 100  # every case launched something (134 launches today)


# ------------------------------------------------------------------------------------------- persistent loops
STAND_IN = dataclasses.replace(DEVICES["interpreter"], name="persistent stand-in", vector_cores=3, matrix_cores=2,
                               persistent=True)


def _same(make, run, exact=True, loops=True):
    """`run(*inputs)` planned for the interpreter (one tile a program) and for the persistent stand-in, on the same
    fresh inputs. The first results are held while the second run allocates: a tile the loops missed shows as
    uninitialised memory, not as the first run's values. `loops`: the one-tile-a-program plan has more programs
    than the stand-in's cores (the backward norms plan rows per program either way: False)."""
    inputs = make()
    with common.record_launches() as one_tile_each:
        run(*inputs)
    with common.record_launches() as persistent, assume(STAND_IN):
        run(*inputs)
    if loops:
        assert max(math.prod(grid) for _, grid, _ in one_tile_each) > STAND_IN.vector_cores
    for kernel, grid, _ in persistent:
        module = kernel.fn.__module__.rsplit(".", 1)[-1]
        cores = STAND_IN.matrix_cores if (module, kernel.fn.__name__) in MATRIX_KERNELS else STAND_IN.vector_cores
        assert len(grid) == 1 and grid[0] <= cores, (kernel.fn.__name__, grid)
    expected = run(*inputs)
    with assume(STAND_IN):
        got = run(*inputs)
    for g, e in zip(_flat(got), _flat(expected), strict=True):
        if exact:
            assert torch.equal(g, e)
        else:  # a weight gradient: per-program partial sums regrouped. fp32 sums of <= 200 terms of size <= ~10
            # here, whose grouping moves a sum by at most ~200 * 2**-24 * sum|terms| ~ 1e-4 * |terms| (worst case)
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)


def _flat(x):
    if isinstance(x, (tuple, list)):
        return [t for y in x for t in _flat(y)]
    return [x] if isinstance(x, torch.Tensor) else []


def _r(*shape, dtype=torch.float32):
    return torch.randn(*shape, device=DEVICE).to(dtype)


needs_kernels = pytest.mark.skipif(not KERNEL_TARGET_OK or not interpreter_loops_from_a_program_id(),
                                   reason="needs CUDA, or TRITON_INTERPRET=1 with an interpreter that loops from a "
                                          "program id (Triton >= 3.9)")


@needs_kernels
@pytest.mark.parametrize("residual", [False, True])
def test_persistent_rms_norm(residual):
    from mojo_compile.kernels.rms_norm import rms_norm_bwd, rms_norm_fwd
    m, n = 37, 24
    _same(lambda: (_r(m, n), _r(m, n) if residual else None, _r(n)),
          lambda x, r, w: rms_norm_fwd(x, r, w, 1e-6, 0.0, "output", x.dtype, config=(4, 4)))
    _same(lambda: (_r(m, n), _r(m, n) if residual else None, _r(n)),  # the column-loop kernel, one row a program
          lambda x, r, w: rms_norm_fwd(x, r, w, 1e-6, 0.0, "output", x.dtype, config=("loop", 8, 4)))
    _same(lambda: (_r(m, n), _r(m, n), _r(n), _r(m).abs() + 0.5),
          lambda dy, x, w, rstd: rms_norm_bwd(dy, x, w, rstd, None, 0.0, "output", True, config=(4, 4, 1)),
          exact=False, loops=False)


@needs_kernels
def test_persistent_layer_norm():
    from mojo_compile.kernels.layer_norm import add_layer_norm_fwd, layer_norm_bwd
    m, n = 37, 24
    _same(lambda: (_r(m, n), _r(m, n), _r(n), _r(n)),
          lambda x, r, w, b: add_layer_norm_fwd(x, r, w, b, 1e-5, config=(4, 4)))
    _same(lambda: (_r(m, n), _r(m, n), _r(n), _r(m), _r(m).abs() + 0.5),
          lambda dy, x, w, mean, rstd: layer_norm_bwd(dy, x, w, mean, rstd, True, True, config=(4, 4, 1)),
          exact=False, loops=False)


@needs_kernels
@pytest.mark.parametrize("layout", ["contiguous", "fused halves"])
def test_persistent_gated_act(layout):
    from mojo_compile.kernels.gated_act import gated_act_bwd, gated_act_fused_fwd, gated_act_fwd
    m, n = 19, 40
    if layout == "contiguous":
        _same(lambda: (_r(m, n), _r(m, n)), lambda g, u: gated_act_fwd(g, u, "silu", config=(2, 16, 4)))
        _same(lambda: (_r(m, n), _r(m, n), _r(m, n)),
              lambda dy, g, u: gated_act_bwd(dy, g, u, "gelu_tanh", config=(2, 16, 4)))
    else:
        _same(lambda: (_r(m, 2 * n),), lambda gu: gated_act_fused_fwd(gu, "gelu", True, config=(2, 16, 4)))


@needs_kernels
def test_persistent_cross_entropy():
    from mojo_compile.kernels.cross_entropy import cross_entropy_bwd, cross_entropy_fwd
    n, v = 9, 50
    labels = torch.randint(0, v, (n,), device=DEVICE)
    _same(lambda: (_r(n, v),), lambda x: cross_entropy_fwd(x, labels, -100, config=(16, 4)))
    _same(lambda: (_r(n, v), _r(n), _r(n), _r(n)),
          lambda x, lse, a, b: cross_entropy_bwd(x, labels, lse, a, b, config=(16, 4)))


@needs_kernels
@pytest.mark.parametrize("interleaved", [False, True])
def test_persistent_rope(interleaved):
    from mojo_compile.kernels.rope import qk_norm_rope_bwd, qk_norm_rope_fwd, rope_fwd
    b, s, hq, hk, d = 2, 11, 4, 2, 16
    cos_sin = (_r(s, d), _r(s, d))
    _same(lambda: (_r(b, s, hq, d), _r(b, s, hk, d)),
          lambda q, k: rope_fwd(q, k, *cos_sin, d, interleaved, 1, config=(2, 4, 4)))
    _same(lambda: (_r(b, s, hq, d), _r(b, s, hk, d), _r(d), _r(d)),
          lambda q, k, wq, wk: qk_norm_rope_fwd(q, k, wq, wk, 1e-6, "output", *cos_sin, d, interleaved, 1,
                                               config=(2, 4, 4)))
    _same(lambda: (_r(b, s, hq, d), _r(b, s, hk, d), _r(b, s, hq, d), _r(b, s, hk, d), _r(d), _r(d),
                   _r(b, s, hq).abs() + 0.5, _r(b, s, hk).abs() + 0.5),
          lambda gq, gk, q, k, wq, wk, rq, rk: qk_norm_rope_bwd(gq, gk, q, k, wq, wk, rq, rk, "output", *cos_sin, d,
                                                                interleaved, 1, config=(2, 4, 4, 1)),
          exact=False)


@needs_kernels
@pytest.mark.parametrize("causal", [False, True])
def test_persistent_attention(causal):
    from mojo_compile.kernels.attention import attention_bwd, attention_fwd
    b, hq, hk, s, d = 2, 4, 2, 40, 16
    config = (16, 16, 4, 1)
    _same(lambda: (_r(b, hq, s, d), _r(b, hk, s, d), _r(b, hk, s, d)),
          lambda q, k, v: attention_fwd(q, k, v, d ** -0.5, causal=causal, config=config))
    q, k, v = _r(b, hq, s, d), _r(b, hk, s, d), _r(b, hk, s, d)
    out, lse = attention_fwd(q, k, v, d ** -0.5, causal=causal, config=config)
    _same(lambda: (_r(b, hq, s, d),),
          lambda do: attention_bwd(do, q, k, v, out, lse, d ** -0.5, causal=causal, config=config))


@needs_kernels
def test_persistent_attention_decode():
    from mojo_compile.kernels.attention_decode import attention_decode
    b, hq, hk, skv, d = 3, 4, 2, 96, 16
    _same(lambda: (_r(b, hq, 1, d), _r(b, hk, skv, d), _r(b, hk, skv, d)),
          lambda q, k, v: attention_decode(q, k, v, d ** -0.5, num_splits=3))
