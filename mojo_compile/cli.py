"""`mojo-compile`: see what the backend rewrote.

    mojo-compile explain SCRIPT.py [ARGS...]   run a script that uses backend="mojo", then print the report
    mojo-compile patterns                      list the registered patterns in the order they are applied
"""
from __future__ import annotations

import argparse
import os
import runpy
import sys


def _explain(args) -> int:
    if not os.path.isfile(args.script):
        print(f"mojo-compile: no such script: {args.script}", file=sys.stderr)
        return 2
    for flag, env in (("target", "MOJO_BACKEND"), ("inner", "MOJO_INNER"), ("disable", "MOJO_DISABLE"),
                      ("dump_dir", "MOJO_DUMP_DIR")):
        if getattr(args, flag):
            os.environ[env] = getattr(args, flag)
    import mojo_compile

    mojo_compile.reset_report()
    sys.argv = [args.script, *args.args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(args.script)))
    status = 0
    try:
        runpy.run_path(args.script, run_name="__main__")
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    report = mojo_compile.last_report()
    print(report.to_json(indent=2) if args.json else "\n" + report.table())
    return status


def _patterns(args) -> int:
    import mojo_compile

    for p in mojo_compile.registered_patterns():
        print(f"{p.name:40s} family={p.family:14s} priority={p.priority}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="mojo-compile", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    explain = sub.add_parser("explain", help="run SCRIPT with its ARGS, then print what backend='mojo' fused")
    explain.add_argument("script")
    explain.add_argument("args", nargs=argparse.REMAINDER)
    explain.add_argument("--target", help="ttx | torch_npu | torch (sets MOJO_BACKEND)")
    explain.add_argument("--inner", help="inductor | eager (sets MOJO_INNER)")
    explain.add_argument("--disable", help="comma-separated pattern names, globs or families (sets MOJO_DISABLE)")
    explain.add_argument("--dump-dir", dest="dump_dir", help="write each graph and its report there")
    explain.add_argument("--json", action="store_true", help="print the report as JSON")
    explain.set_defaults(run=_explain)
    patterns = sub.add_parser("patterns", help="list the registered patterns")
    patterns.set_defaults(run=_patterns)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
