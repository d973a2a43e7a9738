"""`mojo-compile`: see what backend="mojo" rewrote, and whether it changed the numbers.

    mojo-compile explain SCRIPT [--json FILE|-] [--why MODULE_PATH] [-- ARGS...]   what was fused; why not
    mojo-compile verify  SCRIPT [--grad] [-- ARGS...]    each fused site and graph against eager (exit 1: a FAIL)
    mojo-compile bisect  SCRIPT [-- ARGS...]             the pattern, then the site, that makes a graph differ
    mojo-compile diff    SCRIPT [-- ARGS...]             each graph before and after rewriting (pre-dispatch ATen)
    mojo-compile patterns [--json] [--family F]          the registered patterns and graph passes, in applying order
    mojo-compile warm-cache                              trace the built-in patterns into MOJO_CACHE_DIR now
    mojo-compile warm-cache --ship [DIR]                 ... into the package's shipped traces (maintainers)
    mojo-compile --version

SCRIPT is a Python file that compiles with backend="mojo"; the arguments after `--` are its own (every flag before
`--` is ours). Each command runs the script in this process (as `python SCRIPT ARGS` would) and reports on the
graphs it compiled, also when the script raises: the command then exits with the script's code. The Python API of
each command is in mojo_compile.debug (verify, bisect, diff, explain) and mojo_compile.last_report().
"""
from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import os
import runpy
import sys
import traceback
from typing import Optional


# ------------------------------------------------------------------------------------------------------ running
@contextlib.contextmanager
def _stdout_to_stderr(active: bool):
    """The script's output -- print() and what C code writes to fd 1 -- goes to stderr, so that our stdout holds
    only what a program parses."""
    if not active:
        yield
        return
    sys.stdout.flush()
    saved_fd, saved = os.dup(1), sys.stdout
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved_fd, 1)
        os.close(saved_fd)
        sys.stdout = saved


def _run_script(path: str, args: list[str], quiet_stdout: bool = False) -> int:
    """Run SCRIPT as __main__ with ARGS; its exit code (1 and the traceback on stderr when it raises)."""
    saved_argv, saved_path = list(sys.argv), list(sys.path)
    sys.argv = [path, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        with _stdout_to_stderr(quiet_stdout):
            runpy.run_path(path, run_name="__main__")
        return 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)  # sys.exit("message"): Python prints it, and so do we
        return 1
    except BaseException:  # noqa: BLE001 - the script's failure is reported, then what it compiled
        traceback.print_exc()
        print(f"mojo-compile: {path} raised; reporting the graphs compiled before that", file=sys.stderr)
        return 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def _unwritable(path: Optional[str]) -> Optional[str]:
    """Why a report file cannot be written at `path` (None if it can, or if it is no file: unset or "-")."""
    if not isinstance(path, str) or path == "-":
        return None
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"no folder {folder}"
    if os.path.isdir(path):
        return "it is a folder"
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        return "permission denied"
    return None


def _set_options(args) -> None:
    for flag, env in (("target", "MOJO_BACKEND"), ("inner", "MOJO_INNER"), ("disable", "MOJO_DISABLE"),
                      ("dump_dir", "MOJO_DUMP_DIR")):
        if getattr(args, flag, None):
            os.environ[env] = getattr(args, flag)


# ------------------------------------------------------------------------------------------------------ commands
def _explain(args) -> int:
    import mojo_compile

    mojo_compile.reset_report()
    status = _run_script(args.script, args.script_args, quiet_stdout=args.json == "-")
    report = mojo_compile.last_report()
    if args.why is not None:
        print(_why(report, args.why))
    elif args.json is None:
        print("\n" + report.table())
    elif args.json == "-":
        print(report.to_json(indent=2))
    else:
        with open(args.json, "w") as f:
            f.write(report.to_json(indent=2) + "\n")
        print(f"mojo-compile: report of {len(report.graphs)} graph(s) written to {args.json}", file=sys.stderr)
    return status


def _why(report, module_path: str) -> str:
    """The near misses of the unfused sites at MODULE_PATH (or under it; a glob works too)."""
    def under(source: str) -> bool:
        return source == module_path or source.startswith(module_path + ".") or fnmatch.fnmatchcase(source,
                                                                                                   module_path)
    misses = [(g.compile_id, m) for g in report.graphs for m in getattr(g, "near_misses", []) if under(m.source)]
    fused = [(g.compile_id, s) for g in report.graphs for s in g.sites if under(s.source)]
    lines = [f"graph {gid}: {s.source}: fused by {s.pattern} into {s.op} ({s.target})" for gid, s in fused]
    for gid, m in misses:
        closest = f"closest pattern {m.pattern}: " if m.pattern else "no pattern came near: "
        lines.append(f"graph {gid}: {m.source or '<root>'}: {m.family} left unfused ({', '.join(m.ops)}); "
                     f"{closest}{m.reason}")
    return "\n".join(lines) or f"mojo-compile: nothing was fused or left unfused at {module_path!r}"


def _verify(args) -> int:
    from . import debug

    with debug.watching(grad=args.grad) as watcher:
        status = _run_script(args.script, args.script_args, quiet_stdout=True)
    print(watcher.verification.table())
    return status or (0 if watcher.verification.ok else 1)


def _bisect(args) -> int:
    from . import debug

    with debug.watching(bisect=True) as watcher:
        status = _run_script(args.script, args.script_args, quiet_stdout=True)
    if not watcher.bisects:
        print("mojo-compile bisect: no compiled graph differs from eager")
    for result in watcher.bisects:
        print(result.text())
    return status or (1 if watcher.bisects else 0)


def _diff(args) -> int:
    from . import debug

    with debug.watching() as watcher:
        status = _run_script(args.script, args.script_args, quiet_stdout=True)
    diffs = [w.diff() for w in watcher.watches if w.report is not None]
    print("\n\n".join(diffs) if diffs else "mojo-compile diff: no graph was compiled with backend='mojo'")
    return status


def _patterns(args) -> int:
    import mojo_compile

    from mojo_compile.patterns import registered_graph_passes

    chosen = [p for p in mojo_compile.registered_patterns() if args.family is None or p.family == args.family]
    passes = [g for g in registered_graph_passes() if args.family is None or g.family == args.family]
    if args.json:
        print(json.dumps([{"name": p.name, "family": p.family, "priority": p.priority, "kind": "pattern",
                           "tell_tales": [str(t) for t in p.tell_tales]} for p in chosen]
                         + [{"name": g.name, "family": g.family, "kind": "graph pass"} for g in passes], indent=2))
    else:
        for p in chosen:
            print(f"{p.name:40s} family={p.family:14s} priority={p.priority}")
        for g in passes:  # (rewrite() runs them after every pattern, in this order)
            print(f"{g.name:40s} family={g.family:14s} graph pass, after every pattern")
    return 0


def _warm_cache(args) -> int:
    """A first compile in a fresh cache directory traces ~250 pattern input sets (seconds); this does it ahead, e.g.
    when a serving image is built, so that the first compile of each later process reads them."""
    import time

    import torch

    from mojo_compile import pattern_cache, patterns

    start = time.perf_counter()
    patterns.load_fusions()
    try:
        if args.ship is not None:
            path, traces = pattern_cache.ship(args.ship or pattern_cache.SHIPPED_DIR)
            print(f"mojo-compile: {traces} pattern traces shipped in {path} (torch {torch.__version__}) in "
                  f"{time.perf_counter() - start:.1f} s")
            return 0
        sets = patterns.warm_cache()
    except RuntimeError as e:
        print(f"mojo-compile: nothing cached: {e}", file=sys.stderr)
        return 1
    print(f"mojo-compile: {sets} pattern input sets traced into {pattern_cache.cache_dir()} "
          f"(torch {torch.__version__}) in {time.perf_counter() - start:.1f} s")
    return 0


def _version() -> str:
    import torch

    import mojo_compile

    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = "not installed"
    return f"mojo-compile {mojo_compile.__version__} (torch {torch.__version__}, triton {triton_version})"


# ------------------------------------------------------------------------------------------------------ parsing
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mojo-compile", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--version", action="store_true", help="print the versions and exit")
    sub = parser.add_subparsers(dest="command")

    def script_command(name: str, help_text: str, run):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("script")
        p.add_argument("--target", help="ttx | torch_npu | torch (sets MOJO_BACKEND)")
        p.add_argument("--inner", help="inductor | eager (sets MOJO_INNER)")
        p.add_argument("--disable", help="comma-separated pattern names, globs or families (sets MOJO_DISABLE)")
        p.add_argument("--dump-dir", dest="dump_dir", help="write each graph and its report there")
        p.set_defaults(run=run)
        return p

    explain = script_command("explain", "run SCRIPT, then print what backend='mojo' fused", _explain)
    explain.add_argument("--json", metavar="FILE", help="the report as JSON, to FILE or - (stdout; the script's "
                                                        "own output then goes to stderr)")
    explain.add_argument("--why", metavar="MODULE_PATH", help="why the code at MODULE_PATH was or was not fused")
    verify = script_command("verify", "check each fused site and graph of SCRIPT against eager", _verify)
    verify.add_argument("--grad", action="store_true", help="compare the sites' input gradients too")
    script_command("bisect", "find the pattern and site that make SCRIPT's graphs differ from eager", _bisect)
    script_command("diff", "show each graph of SCRIPT before and after rewriting", _diff)
    patterns = sub.add_parser("patterns", help="list the registered patterns")
    patterns.add_argument("--json", action="store_true")
    patterns.add_argument("--family", help="only this family")
    patterns.set_defaults(run=_patterns)
    warm = sub.add_parser("warm-cache", help="trace the built-in patterns into the pattern cache (MOJO_CACHE_DIR) "
                                             "ahead of the first compile")
    warm.add_argument("--ship", nargs="?", const="", metavar="DIR",
                      help="write the traces as the package's shipped file for this torch and Python, into DIR "
                           "(default: mojo_compile/pattern_data), for every later first compile of this source")
    warm.set_defaults(run=_warm_cache)
    return parser


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ours, script_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = _parser()
    args = parser.parse_args(ours)
    if args.version:
        print(_version())
        return 0
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    if hasattr(args, "script"):
        if not os.path.isfile(args.script):
            print(f"mojo-compile: no such script: {args.script}", file=sys.stderr)
            return 2
        args.script_args = script_args
        unwritable = _unwritable(getattr(args, "json", None))
        if unwritable:  # (checked before the script runs: a training script may run for minutes)
            print(f"mojo-compile: cannot write the report to {args.json}: {unwritable}", file=sys.stderr)
            return 2
        _set_options(args)
    elif script_args:
        parser.error(f"{args.command} takes no script arguments")
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
