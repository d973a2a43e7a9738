"""The pure-Python parts of scripts/ascend_check.py (the Ascend compile check): the grid limit, the detector of
scalarised memory accesses in triton-adapter-opt's output, and the one-line error summaries. No triton-ascend needed:
the IR below is trimmed from what triton-adapter-opt 3.2.0 prints."""
import importlib.util
import io
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def check():
    spec = importlib.util.spec_from_file_location("ascend_check", os.path.join(ROOT, "scripts", "ascend_check.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the script's annotations through sys.modules
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


# A gather, tl.load(X + tl.load(I + offs)): the load through the loaded indices becomes a loop of scalar loads.
GATHER_IR = """\
#loc = loc("/repo/mojo_compile/kernels/k.py":10:0)
module {
  func.func @gather(%arg2: memref<?xf32>, %arg3: memref<?xi32>) attributes {mix_mode = "aiv"} {
    %c64 = arith.constant 64 : index
    %c1 = arith.constant 1 : index
    %c0 = arith.constant 0 : index
    %0 = bufferization.to_tensor %alloc restrict writable : memref<64xi32> loc(#loc2)
    %1 = tensor.empty() : tensor<64xf32>
    %2 = scf.for %arg11 = %c0 to %c64 step %c1 iter_args(%arg12 = %1) -> (tensor<64xf32>) {
      %extracted = tensor.extract %0[%arg11] {DiscreteMemAccess} : tensor<64xi32> loc(#loc5)
      %3 = arith.index_cast %extracted : i32 to index
      %rc = memref.reinterpret_cast %arg2 to offset: [%3], sizes: [1], strides: [1] : memref<?xf32> to memref<1xf32>
      %4 = memref.load %rc[%c0] : memref<1xf32, strided<[1], offset: ?>> loc(#loc5)
      %inserted = tensor.insert %4 into %arg12[%arg11] : tensor<64xf32>
      scf.yield {DiscreteMemAccess} %inserted : tensor<64xf32>
    } {ExtractedLoadOrStore}
    return
  }
}
#loc2 = loc("/repo/mojo_compile/kernels/k.py":12:10)
#loc3 = loc("/repo/mojo_compile/kernels/k.py":30:4)
#loc4 = loc("/repo/mojo_compile/kernels/k.py":14:17)
#loc5 = loc(callsite(#loc3 at #loc4))
"""

# A row loop that loads one rstd per row on purpose (tl.load(RSTD + row)): a scalar load in an scf.for, not tagged.
INTENDED_SCALAR_IR = """\
module {
  func.func @rows(%arg2: memref<?xf32>) attributes {mix_mode = "aiv"} {
    scf.for %arg9 = %c0_i32 to %arg5 step %c1_i32  : i32 {
      %5 = arith.cmpi slt, %4, %arg3 : i64
      scf.if %5 {
        %rc = memref.reinterpret_cast %arg2 to offset: [%6], sizes: [1], strides: [1] : memref<?xf32> to memref<1xf32>
        %7 = memref.load %rc[%c0] : memref<1xf32, strided<[1], offset: ?>>
        memref.store %7, %rc[%c0] : memref<1xf32, strided<[1], offset: ?>>
      } else {
        %8 = arith.addi %4, %4 : i64
      }
    }
    return
  }
}
"""


def test_grid_programs_flatten_like_triton_ascend(check):
    assert check.grid_programs((7,)) == 7
    assert check.grid_programs((4, 3)) == 12
    assert check.grid_programs((2, 3, 5)) == 30


def test_grid_limit_is_65535_programs(check):
    assert check.grid_problem((65535,)) is None
    assert check.grid_problem((255, 257)) is None  # 65535
    problem = check.grid_problem((4096, 38))
    assert problem is not None and "155648" in problem and "65535" in problem
    assert check.grid_problem((1, 1, 65536)) is not None


def test_a_gather_is_reported_with_its_source_line(check):
    accesses = check.discrete_accesses(GATHER_IR)
    assert accesses == ["load@k.py:30 via k.py:14"]
    assert check.summarise_accesses(accesses) == "1 scalarised load (k.py:30 via k.py:14)"


def test_intended_scalar_loads_in_loops_are_not_reported(check):
    assert check.discrete_accesses(INTENDED_SCALAR_IR) == []


def test_contiguous_ir_has_no_discrete_access(check):
    ir = """\
module {
  func.func @contig(%arg2: memref<?xf32>) attributes {mix_mode = "aiv"} {
    %rc = memref.reinterpret_cast %arg2 to offset: [%1], sizes: [64], strides: [1] : memref<?xf32> to memref<64xf32>
    memref.copy %subview, %subview_1 : memref<?xf32, strided<[1], offset: ?>> to memref<?xf32, strided<[1]>>
    %9 = math.exp %8 : tensor<64xf32>
    return
  }
}
"""
    assert check.discrete_accesses(ir) == []


def test_store_loops_and_repeated_lines_are_counted(check):
    loop = """\
    scf.for %i = %c0 to %c64 step %c1 {
      %e = tensor.extract %v[%i] {DiscreteMemAccess} : tensor<64xf32>
      memref.store %e, %rc[%c0] : memref<1xf32> loc("/r/k.py":7:3)
    } {ExtractedLoadOrStore}
"""
    ir = "module {\n  func.func @f() {\n" + loop + loop + "    return\n  }\n}\n"
    accesses = check.discrete_accesses(ir)
    assert accesses == ["store@k.py:7", "store@k.py:7"]
    assert check.summarise_accesses(accesses) == "2 scalarised stores (k.py:7 x2)"


def test_error_summary_takes_the_innermost_front_end_message(check):
    text = """CompilationError: at 7:17:
def _fwd_kernel(G, U, Y):
    a = round_to(_act(g, ACT, INTERPRET), dtype, INTERPRET).to(tl.float32)
                 ^
CompilationError('def _act(g):\\n    return g\\n', <ast.BinOp object at 0x7f>, \
'TypeError("unsupported operand type(s) for +: \\'float\\' and \\'NoneType\\'")')"""
    assert check.error_summary(text) == ("TypeError(\"unsupported operand type(s) for +: 'float' and 'NoneType'\") "
                                         "at `a = round_to(_act(g, ACT, INTERPRET), dtype, INTERPRET).to(tl.float32)`")


def test_error_summary_of_adapter_errors_and_crashes(check):
    rejected = ("MLIRCompilationError: \n///---[ERROR][Triton][BEG]---\n[ConvertTritonIRToLinalgIR] encounters error:\n"
                "/tmp/x/kernel.ttir.mlir:12:5: error: failed to legalize operation 'tt.gather'\n[INFO]: cache\n")
    assert check.error_summary(rejected) == "error: failed to legalize operation 'tt.gather'"
    crashed = ("MLIRCompilationError:\nPLEASE submit a bug report to https://x\nStack dump:\n"
               " #0 0x0 (triton-adapter-opt)\n")
    assert check.is_tool_crash(crashed)
    assert check.error_summary(crashed).startswith("triton-adapter-opt crashed")


def test_config_label_keeps_constexprs_and_options_only(check):
    bound = dict(X=object(), M=4096, N=896, HAS_W=True, BLOCK_N=1024, INTERPRET=False, num_warps=8)
    assert check.config_label(bound, ("HAS_W", "BLOCK_N", "INTERPRET")) == "HAS_W=True BLOCK_N=1024 num_warps=8"


def test_report_lines_and_exit_count(check):
    ok = check.Result("rms_norm._fwd_rows_kernel", "bfloat16 BLOCK_N=4096", worst_grid=(1024,), mix_mode="aiv")
    bad = check.Result("cross_entropy._bwd_kernel", "float32 BLOCK_V=4096", worst_grid=(4096, 38),
                       worst_grid_case="cross_entropy_bwd T=4096", grid_error=check.grid_problem((4096, 38)),
                       discrete=["load@ce.py:3"])
    out = io.StringIO()
    assert check.report([ok, bad], out) == 1
    lines = out.getvalue().splitlines()
    assert lines[0] == "OK   rms_norm._fwd_rows_kernel [bfloat16 BLOCK_N=4096] aiv, max grid 1024"
    assert lines[1].startswith("FAIL cross_entropy._bwd_kernel [float32 BLOCK_V=4096]: grid: grid (4096, 38)")
    assert "discrete: 1 scalarised load (ce.py:3)" in lines[1]
    assert "1/2 configurations OK over 2 kernels" in out.getvalue()


def test_a_grid_over_the_cores_is_not_persistent(check):
    assert check.grid_problem((40,), cores=40) is None
    assert "41 programs > 40 cores" in check.grid_problem((41,), cores=40)
    assert check.grid_problem((41,)) is None  # the limit alone


def test_marked_gathers_are_told_apart(check):
    source = {("attention.py", 452): "    lse = tl.load(LSE + stat, mask=row_ok, other=0.0)  # gather",
              ("rope.py", 71): "    return tl.load(C + offs, mask=m, other=0.0)"}

    def line(name, number):
        return source.get((name, number), "")
    assert check.marked_gather("load@attention.py:452 via attention.py:419", line)
    assert not check.marked_gather("load@rope.py:71 via rope.py:182", line)
    assert not check.marked_gather("load", line)  # no location: never excused
