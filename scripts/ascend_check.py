"""Check that every Triton kernel of mojo_compile compiles for a Huawei Ascend NPU, without an NPU.

Run inside the triton-ascend venv (scripts/ascend_venv.sh), from the repo root:

    .venv-ascend/bin/python scripts/ascend_check.py [--json PATH] [-k SUBSTR] [--ir-dir DIR]

How: triton-ascend's active driver is replaced by a stub (device 0, stream 0, target Ascend910B3, fake core counts,
a launcher that runs nothing), and the compiler's binary stage ("npubin", which needs CANN's bishengir-compile) by
one that only parses the adapter IR's metadata. So triton-ascend's own front end (TTIR) and its triton-adapter-opt
lowering to linalg / memref (the "ttadapter" stage) run for real, and its own launch path (`JITFunction.run`, with
its 65535-program grid limit) runs too. Every launcher is driven over model shapes on meta tensors (no memory, no
data), its launches recorded by mojo_compile's `record_launches`, and each recorded launch is then issued as
`kernel[grid](...)` against the stub. Per (kernel, configuration):
  compile   the launch compiled to adapter IR (else: the front end's or triton-adapter-opt's error);
  grid      gridX * gridY * gridZ <= 65535 (triton-ascend flattens the grid onto cores and refuses more);
  discrete  no memory access lowered to a per-element scalar loop: triton-adapter-opt's unstructured-access
            lowering tags such loops `{ExtractedLoadOrStore}` and their element extracts `{DiscreteMemAccess}`.
Prints one line per (kernel, configuration), a summary, and exits 1 if anything failed.

The functions above the "triton-ascend" marker are plain Python (tests/test_ascend_check.py runs them without
triton-ascend).
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import hashlib
import io
import json
import os
import re
import sys
import tempfile
import time
from typing import Callable, Iterable, Optional

MAX_GRID_PROGRAMS = 65535  # triton-ascend's runtime/jit.py: "grid should be less than 65536!"
NPU_TARGET_ARCH = "Ascend910B3"
# Ascend910B3 (A2): 20 AI cores (cube + 2 vector each), 40 vector cores; what get_device_properties reports there.
NUM_AICORE, NUM_VECTORCORE = 20, 40  # as lowering/devices.py's DEVICES["Ascend910B3"], which the launchers plan for


# ------------------------------------------------------------------------------------------------ pure checks
def grid_programs(grid) -> int:
    """The flattened program count of a launch grid, as triton-ascend computes it (gridX * gridY * gridZ)."""
    dims = tuple(grid) + (1,) * (3 - len(grid))
    count = 1
    for dim in dims[:3]:
        count *= int(dim)
    return count


def grid_problem(grid, cores: Optional[int] = None) -> Optional[str]:
    """Why triton-ascend refuses this grid, or why it is not one program per core (`cores`: the vector or AI cores
    the kernel runs on; the grid maps to physical cores, so more programs than cores run in waves), or None."""
    programs = grid_programs(grid)
    if programs > MAX_GRID_PROGRAMS:
        return f"grid {tuple(grid)} = {programs} programs > {MAX_GRID_PROGRAMS}"
    if cores is not None and programs > cores:
        return f"grid {tuple(grid)} = {programs} programs > {cores} cores (not persistent)"
    return None


_LOC_ALIAS = re.compile(r'^(#loc\d*)\s*=\s*loc\((.*)\)\s*$')
_LOC_FILE = re.compile(r'"([^"]+)":(\d+):(\d+)')
_LOC_REF = re.compile(r'loc\((#loc\d*|"[^"]+":\d+:\d+)\)')
_SCALAR_ACCESS = re.compile(r'\b(memref\.load|memref\.store|memref\.atomic_rmw|memref\.generic_atomic_rmw|'
                            r'tensor\.extract)\b')


def _resolve_locations(ir: str) -> dict[str, str]:
    """#locN aliases of an MLIR module printed with debug info -> "file.py:line", or "file.py:line via file.py:line"
    for an inlined call (the callee's line, then the kernel's line that called it)."""
    aliases = {}
    for line in ir.splitlines():
        m = _LOC_ALIAS.match(line.strip())
        if m:
            aliases[m.group(1)] = m.group(2)

    def positions(text: str, depth: int = 0) -> list[str]:
        # every file position in source order, following aliases: callsite(callee at caller) lists callee first
        found = []
        for token in re.finditer(r'"([^"]+)":(\d+):\d+|(#loc\d*)\b', text):
            if token.group(1):
                found.append(f"{os.path.basename(token.group(1))}:{token.group(2)}")
            elif depth < 32 and token.group(3) in aliases:
                found.extend(positions(aliases[token.group(3)], depth + 1))
        return found

    resolved = {}
    for name, body in aliases.items():
        found = positions(body)
        if found:
            resolved[name] = found[0] if len(found) == 1 or found[0] == found[-1] else f"{found[0]} via {found[-1]}"
    return resolved


def _location(line: str, locations: dict[str, str]) -> Optional[str]:
    m = _LOC_REF.search(line)
    if not m:
        return None
    ref = m.group(1)
    if ref.startswith('"'):
        f = _LOC_FILE.search(ref)
        return f"{os.path.basename(f.group(1))}:{f.group(2)}" if f else None
    return locations.get(ref)


def discrete_accesses(ir: str) -> list[str]:
    """The scalarised memory accesses of an adapter-IR module: one entry per load / store inside a loop that
    triton-adapter-opt built to access memory element by element (an scf.for tagged {ExtractedLoadOrStore}), plus
    any other op it tagged {DiscreteMemAccess}. Each entry: "load" / "store" / ..., and its source line where the IR
    carries debug locations. Scalar loads that the kernel meant (tl.load of one address) are not tagged: not listed."""
    locations = _resolve_locations(ir)
    found: list[str] = []
    # Regions are tracked by lines ending in "{" (open) and starting with "}" (close); attribute dictionaries such
    # as {DiscreteMemAccess} open and close on one line and are ignored. Each open region keeps the accesses seen
    # in it until its closing line tells whether it was a scalarised-access loop.
    stack: list[list[tuple[str, Optional[str]]]] = []
    top_level: list[tuple[str, Optional[str]]] = []
    for raw in ir.splitlines():
        line = raw.strip()
        if line.startswith("}"):
            accesses = stack.pop() if stack else []
            if "ExtractedLoadOrStore" in line:
                found.extend(_describe(kind, loc) for kind, loc in accesses if kind != "tensor.extract")
            elif stack:
                stack[-1].extend(accesses)
            # "} else {" / "} do {" close one region and open the next
            if line.endswith("{"):
                stack.append([])
            continue
        m = _SCALAR_ACCESS.search(line)
        if m:
            entry = (m.group(1), _location(line, locations))
            (stack[-1] if stack else top_level).append(entry)
            if "DiscreteMemAccess" in line and not stack:
                found.append(_describe(*entry))
        if line.endswith("{"):
            stack.append([])
    return found


GATHER_MARK = "# gather"  # on a kernel's source line: a scalarised access there is what the kernel means


def marked_gather(access: str, source_line: Callable[[str, int], str]) -> bool:
    """Whether a discrete_accesses entry ("load@attention.py:452 via attention.py:419") sits on a source line that
    the kernel marks as a gather (a few values a tile, by computed index, meant to be read one by one)."""
    _, _, where = access.partition("@")
    name, _, line = where.split(" ")[0].partition(":")
    return bool(name and line.isdigit() and GATHER_MARK in source_line(name, int(line)))


def kernel_source_line(name: str, line: int) -> str:
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "mojo_compile", "kernels", name)
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return ""
    return lines[line - 1] if 0 < line <= len(lines) else ""


def _describe(kind: str, loc: Optional[str]) -> str:
    name = {"memref.load": "load", "memref.store": "store", "tensor.extract": "extract"}.get(kind, kind)
    return f"{name}@{loc}" if loc else name


def summarise_accesses(accesses: list[str]) -> str:
    """"3 scalar loads (rope.py:120 x2, rope.py:131), 1 store (...)" from discrete_accesses' entries."""
    by_kind: dict[str, list[str]] = {}
    for entry in accesses:
        kind, _, loc = entry.partition("@")
        by_kind.setdefault(kind, []).append(loc)
    parts = []
    for kind, locs in by_kind.items():
        named = [loc for loc in locs if loc]
        where = ""
        if named:
            counted = {loc: named.count(loc) for loc in dict.fromkeys(named)}
            where = " (" + ", ".join(f"{loc} x{n}" if n > 1 else loc for loc, n in counted.items()) + ")"
        parts.append(f"{len(locs)} scalarised {kind}{'s' if len(locs) > 1 else ''}{where}")
    return ", ".join(parts)


def _innermost_message(line: str) -> str:
    """Triton nests a failing helper's CompilationError in its caller's as a repr, CompilationError(src, node,
    'message'): the message of the innermost one."""
    for _ in range(8):
        m = re.match(r"""^\w*CompilationError\(.*, (['"])(.*)\1\)\s*$""", line, re.S)
        if not m:
            break
        try:
            line = ast.literal_eval(m.group(1) + m.group(2) + m.group(1))
        except (ValueError, SyntaxError):
            break
    return line


def is_tool_crash(text: str) -> bool:
    """triton-adapter-opt died (a signal and LLVM's stack dump) rather than rejecting the kernel with a message."""
    return "Stack dump:" in text or "PLEASE submit a bug report" in text


def error_summary(text: str) -> str:
    """One line out of a compile error: triton-adapter-opt's "error:" line, or the front end's innermost message and
    the source line it points at."""
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    if is_tool_crash(text):
        assertion = next((line.strip() for line in lines if "Assertion" in line), None)
        return f"triton-adapter-opt crashed: {assertion or 'a stack dump, no message'}"[:300]
    for line in lines:
        if " error: " in line or line.strip().startswith("error:"):
            return re.sub(r'^.*?error:\s*', "error: ", line.strip())[:300]
    for marker in ("ASCEND_HOME_PATH", "grid should be less than"):
        for line in lines:
            if marker in line:
                return line.strip()[:300]
    noise = ("[ERROR]", "///", "[INFO]", "Traceback", "The above exception")
    meaningful = [line for line in lines if not line.strip().startswith(noise)]
    if not meaningful:
        return "unknown error"
    message = _innermost_message(meaningful[-1].strip())
    carets = [i for i, line in enumerate(meaningful) if line.strip() == "^"]
    where = f" at `{meaningful[carets[-1] - 1].strip()}`" if carets and carets[-1] > 0 else ""
    return (message + where)[:400]


@dataclasses.dataclass
class Result:
    """The verdict on one (kernel, configuration): every launch of it that the cases made."""
    kernel: str
    config: str
    cases: list = dataclasses.field(default_factory=list)
    compile_error: Optional[str] = None
    compile_error_text: Optional[str] = None
    worst_grid: Optional[tuple] = None
    worst_grid_case: Optional[str] = None
    grid_error: Optional[str] = None
    discrete: list = dataclasses.field(default_factory=list)
    gathers: list = dataclasses.field(default_factory=list)  # scalarised accesses on lines marked GATHER_MARK
    mix_mode: Optional[str] = None
    tool_crashes: int = 0  # triton-adapter-opt crashes that a retry got past
    ir_file: Optional[str] = None

    @property
    def ok(self) -> bool:
        """Compiled, a grid within the limits, and no scalarised access."""
        return self.compile_error is None and self.grid_error is None and not self.discrete

    def reasons(self) -> list[str]:
        reasons = []
        if self.compile_error is not None:
            reasons.append(f"compile: {self.compile_error}")
        if self.grid_error is not None:
            reasons.append(f"grid: {self.grid_error} ({self.worst_grid_case})")
        if self.discrete:
            reasons.append(f"discrete: {summarise_accesses(self.discrete)}")
        return reasons

    def line(self) -> str:
        head = f"{'OK  ' if self.ok else 'FAIL'} {self.kernel} [{self.config}]"
        if self.ok:
            mode = f" {self.mix_mode}" if self.mix_mode else ""
            crashes = f" (triton-adapter-opt crashed {self.tool_crashes}x, then compiled)" if self.tool_crashes else ""
            gathers = f", marked gathers: {summarise_accesses(self.gathers)}" if self.gathers else ""
            return f"{head}{mode}, max grid {grid_programs(self.worst_grid or (0,))}{gathers}{crashes}"
        return f"{head}: " + "; ".join(self.reasons())


def config_label(bound: dict, constexprs: Iterable[str] = (), tensor_type=None) -> str:
    """The launch's configuration in words: the dtype of its first tensor argument, its constexpr arguments and its
    launch options (num_warps ...). Runtime sizes are left out: one configuration serves every size."""
    constexprs = set(constexprs)
    parts = [f"{name}={value}" for name, value in bound.items()
             if (name in constexprs or name in LAUNCH_OPTIONS) and name != "INTERPRET"]
    if tensor_type is not None:
        first = next((v for v in bound.values() if isinstance(v, tensor_type)), None)
        if first is not None:
            parts.insert(0, str(first.dtype).replace("torch.", ""))
    return " ".join(parts)


LAUNCH_OPTIONS = ("num_warps", "num_stages", "enable_fp_fusion")


def report(results: list[Result], out=sys.stdout) -> int:
    """Prints each result and a summary; returns the number of failing (kernel, configuration)s."""
    for r in results:
        print(r.line(), file=out)
    failed = [r for r in results if not r.ok]
    kinds = {"compile": sum(r.compile_error is not None for r in results),
             "grid": sum(r.grid_error is not None for r in results),
             "discrete": sum(bool(r.discrete) for r in results)}
    kernels = sorted({r.kernel for r in results})
    bad_kernels = sorted({r.kernel for r in failed})
    print(f"\n{len(results) - len(failed)}/{len(results)} configurations OK over {len(kernels)} kernels; failing: "
          + ", ".join(f"{n} {k}" for k, n in kinds.items()), file=out)
    for kernel in kernels:
        rs = [r for r in results if r.kernel == kernel]
        bad = [r for r in rs if not r.ok]
        why = sorted({reason.split(":")[0] for r in bad for reason in r.reasons()})
        print(f"  {'FAIL' if bad else 'OK  '} {kernel}: {len(rs) - len(bad)}/{len(rs)} OK"
              + (f" ({', '.join(why)})" if why else ""), file=out)
    if bad_kernels:
        print(f"FAILED: {len(bad_kernels)} of {len(kernels)} kernels", file=out)
    return len(failed)


# ============================================================================================== triton-ascend
def install_stub_driver():
    """Make triton-ascend compile for Ascend910B3 and stop before its binary stage, on a machine without CANN.

    The driver: triton-ascend's NPUDriver asks torch_npu for the device and stream and compiles npu_utils.cpp
    against CANN for the arch and core counts, so a stand-in answers those. Its launcher runs nothing.
    The binary stage: AscendBackend.add_stages is wrapped so that "npubin" runs triton-ascend's own
    _parse_linalg_metadata on the adapter IR (the metadata a launch needs: kernel name, mix_mode) and returns an
    empty binary instead of calling bishengir-compile."""
    import triton
    from triton.backends import backends
    from triton.backends.compiler import GPUTarget
    from triton.backends.driver import DriverBase

    if "ascend" not in backends:
        raise SystemExit(f"this Triton ({triton.__version__}, {os.path.dirname(triton.__file__)}) is not "
                         "triton-ascend: run scripts/ascend_venv.sh and use its python")
    backend_cls = backends["ascend"].compiler
    if not getattr(backend_cls.add_stages, "_mojo_stub", False):
        original_add_stages = backend_cls.add_stages
        parse_linalg_metadata = original_add_stages.__globals__["_parse_linalg_metadata"]

        def add_stages(self, stages, options):
            original_add_stages(self, stages, options)
            if "npubin" in stages and "ttadapter" in stages:
                def adapter_ir_only(linalg: str, metadata: dict) -> bytes:
                    parse_linalg_metadata(linalg, metadata)
                    return b""
                stages["npubin"] = adapter_ir_only

        add_stages._mojo_stub = True
        backend_cls.add_stages = add_stages

    class StubUtils:
        def get_device_properties(self, device):
            return {"max_shared_mem": 1, "num_aicore": NUM_AICORE, "num_vectorcore": NUM_VECTORCORE}

        def get_arch(self):
            return NPU_TARGET_ARCH

        def get_aicore_num(self):
            return NUM_AICORE

        def get_aivector_core_num(self):
            return NUM_VECTORCORE

        def load_binary(self, name, kernel, shared, device):
            return None, None, 0, 0  # module, function, n_regs, n_spills

    class StubLauncher:
        def __init__(self, src, metadata):
            self.metadata = metadata

        def __call__(self, grid_x, grid_y, grid_z, *args):
            return None  # nothing runs: the grid was checked by JITFunction.run before this

    class StubNPUDriver(DriverBase):
        def __init__(self):
            self.utils = StubUtils()
            self.launcher_cls = StubLauncher

        @classmethod
        def is_active(cls):
            return True

        def get_current_target(self):
            return GPUTarget("npu", NPU_TARGET_ARCH, 0)

        def get_current_device(self):
            return 0

        def set_current_device(self, device):
            pass

        def get_current_stream(self, device=None):
            return 0

        def get_device_interface(self):
            raise NotImplementedError("no NPU: the stub driver only compiles")

        def get_benchmarker(self):
            raise NotImplementedError("no NPU: the stub driver only compiles")

        def get_empty_cache_for_benchmark(self):
            raise NotImplementedError("no NPU: the stub driver only compiles")

    triton.runtime.driver.set_active(StubNPUDriver())


# ---------------------------------------------------------------------------------------------------- running
def _kernel_name(kernel) -> str:
    fn = getattr(kernel, "fn", kernel)
    return f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__name__}"


def _specialisation(bound: dict, tensor_type) -> tuple:
    """What Triton compiles one kernel per: constexprs and options, tensor dtypes, and for ints whether they are 1
    or a multiple of 16 (its integer specialisation)."""
    key = []
    for name, value in bound.items():
        if isinstance(value, tensor_type):
            key.append((name, str(value.dtype)))
        elif isinstance(value, bool) or not isinstance(value, int) or name.isupper():
            key.append((name, repr(value)))
        else:
            key.append((name, "int", value == 1, value % 16 == 0))
    return tuple(key)


CRASH_RETRIES = 2  # triton-adapter-opt 3.2.0 now and then segfaults on a kernel it compiles on the next try


def _compile(kernel, grid, bound: dict, result: "Result"):
    """Compiles one launch to adapter IR (or takes it from JITFunction's cache) without launching it. A crash of
    triton-adapter-opt is retried; a crash that recurs is the verdict, one that does not is noted on the result."""
    for attempt in range(CRASH_RETRIES + 1):
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                return kernel.warmup(grid=grid, **bound)
        except Exception as e:  # noqa: BLE001
            if attempt == CRASH_RETRIES or not is_tool_crash(str(e)):
                raise
            result.tool_crashes += 1


def run(kernel_filter: Optional[str] = None, ir_dir: Optional[str] = None, verbose: bool = False) -> list[Result]:
    import torch
    from mojo_compile.kernels.common import record_launches
    from mojo_compile.kernels.launch_cases import cases
    from mojo_compile.lowering.devices import assume

    results: dict[tuple, Result] = {}
    compiled: dict[tuple, Optional[str]] = {}  # specialisation -> compile error (None: compiled)
    for case, call in cases("meta"):
        with record_launches() as launches, assume(NPU_TARGET_ARCH):  # the launchers plan for the NPU
            call()
        for kernel, grid, bound in launches:
            name = _kernel_name(kernel)
            if kernel_filter and kernel_filter not in name:
                continue
            constexprs = [p.name for p in kernel.params if p.is_constexpr]
            label = config_label(bound, constexprs, torch.Tensor)
            result = results.setdefault((name, label), Result(name, label))
            result.cases.append(case)
            grid = tuple(int(g) for g in grid)
            if result.worst_grid is None or grid_programs(grid) > grid_programs(result.worst_grid):
                result.worst_grid, result.worst_grid_case = grid, case
            problem = grid_problem(grid)
            spec = (name, _specialisation(bound, torch.Tensor))
            if spec in compiled and compiled[spec] is not None:
                continue  # failed to compile before: the same error again
            started = time.time()
            try:
                compiled_kernel = _compile(kernel, grid, bound, result)
            except Exception as e:  # noqa: BLE001 - every compile failure is a finding
                text = f"{type(e).__name__}: {e}"
                compiled[spec] = text
                if result.compile_error is None:
                    result.compile_error, result.compile_error_text = error_summary(text), text
                if verbose:
                    print(f"  compile {name} [{label}] failed after {time.time() - started:.1f}s", flush=True)
                continue
            try:  # triton-ascend's launch path: its grid check, then the stub launcher
                with contextlib.redirect_stdout(io.StringIO()):  # its "Please DO NOT tune args ['num_warps']!"
                    kernel[grid](**bound)
            except RuntimeError as e:
                if "grid should be less than" not in str(e):
                    raise
                assert problem, (grid, e)  # triton-ascend refuses exactly what grid_problem does
            if spec not in compiled:
                compiled[spec] = None
                ir = compiled_kernel.asm.get("ttadapter", "")
                for access in discrete_accesses(ir):
                    found = result.gathers if marked_gather(access, kernel_source_line) else result.discrete
                    if access not in found:
                        found.append(access)
                mode = re.search(r'mix_mode\s*=\s*"([^"]+)"', ir)
                result.mix_mode = mode.group(1) if mode else result.mix_mode
                if ir_dir:
                    os.makedirs(ir_dir, exist_ok=True)
                    digest = hashlib.sha1(repr(spec).encode()).hexdigest()[:10]
                    path = os.path.join(ir_dir, f"{name}.{digest}.ttadapter.mlir")
                    with open(path, "w") as f:
                        f.write(ir)
                    result.ir_file = path
                if verbose:
                    print(f"  compiled {name} [{label}] in {time.time() - started:.1f}s", flush=True)
    for result in results.values():  # "mix": a kernel with tl.dot, on AI cores; "aiv": vector cores only
        result.grid_error = grid_problem(result.worst_grid, NUM_AICORE if result.mix_mode == "mix" else NUM_VECTORCORE)
    return list(results.values())


def main(argv: Optional[Iterable[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="PATH", help="write the results to PATH")
    parser.add_argument("-k", metavar="SUBSTR", dest="kernel_filter",
                        help="only kernels whose name (module.kernel, e.g. rope._rope_kernel) contains SUBSTR")
    parser.add_argument("--ir-dir", metavar="DIR", help="write each configuration's adapter IR into DIR")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each compile and its time")
    args = parser.parse_args(argv)

    # Debug locations in the adapter IR name the source line of each scalarised access; a fresh cache keeps the
    # stub binaries out of ~/.triton (a real NPU run must never find them).
    os.environ.setdefault("TRITON_DISABLE_LINE_INFO", "0")
    os.environ.pop("TRITON_INTERPRET", None)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    started = time.time()
    with tempfile.TemporaryDirectory(prefix="mojo-ascend-check-") as cache:
        os.environ.setdefault("TRITON_CACHE_DIR", cache)
        install_stub_driver()
        results = run(args.kernel_filter, args.ir_dir, args.verbose)
    failures = report(results)
    elapsed = time.time() - started
    print(f"{elapsed:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"target": NPU_TARGET_ARCH, "seconds": round(elapsed, 1), "failures": failures,
                       "results": [dict(dataclasses.asdict(r), ok=r.ok, reasons=r.reasons()) for r in results]},
                      f, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
