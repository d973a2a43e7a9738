"""Run the whole test suite (tests/, the conformance suite included) on a GPU machine and write GPU_VERIFIED.md:
the date, GPU, torch / triton / transformers versions, the git tree hash of mojo_compile/ that ran, and the pass /
fail counts with the failures.

    python scripts/gpu_verify.py [-n 16] [--out GPU_VERIFIED.md] [-- extra pytest args]

When one run does not fit a machine's time limit, run the suite in N shards, each writing a part, and merge the
parts into the record; the merge refuses parts of different trees or a missing shard. Test files are dealt out by
their seconds in the last merged run (scripts/test_seconds.json, which --merge rewrites from the parts' junit
times); a file without a time there counts its size at that run's seconds per byte (size alone where no run is on
file):

    python scripts/gpu_verify.py --shard 1/2 --out part1.json [-- ...]     (on the GPU, one call per shard)
    python scripts/gpu_verify.py --merge part1.json part2.json --out GPU_VERIFIED.md

A shard whose failure was fixed in tests/ alone (mojo_compile/ unchanged) is re-run on the files of its part, even
where the changed test file's size would now deal the files out differently:

    python scripts/gpu_verify.py --rerun part2.json --out part2.json [-- ...]

The tree hash is computed from the files themselves, exactly as git hashes a tree, so it equals
`git rev-parse HEAD:mojo_compile` of a commit holding these files, with or without a .git folder here.
An issue that changes mojo_compile/ is verified when this record's hash equals the submitted tree's and it shows
0 failures."""
from __future__ import annotations

import argparse
import datetime
import functools
import hashlib
import json
import os
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECONDS_FILE = os.path.join(ROOT, "scripts", "test_seconds.json")  # {test file: summed test seconds on the GPU}
IGNORED_DIRS = {"__pycache__"}
IGNORED_SUFFIXES = (".pyc", ".pyo")


def git_tree_hash(path: str) -> str:
    """The git object id of the tree at `path` (files as committed: mode 100644, or 100755 if executable)."""
    entries = []
    for name in os.listdir(path):
        full = os.path.join(path, name)
        if os.path.isdir(full):
            if name in IGNORED_DIRS or name.endswith(".egg-info"):
                continue
            entries.append((name + "/", b"40000 " + name.encode() + b"\0" + bytes.fromhex(git_tree_hash(full))))
        elif not name.endswith(IGNORED_SUFFIXES):
            with open(full, "rb") as f:
                data = f.read()
            blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
            mode = b"100755" if os.access(full, os.X_OK) else b"100644"
            entries.append((name, mode + b" " + name.encode() + b"\0" + bytes.fromhex(blob)))
    body = b"".join(entry for _, entry in sorted(entries, key=lambda e: e[0]))  # git sorts dirs as "name/"
    return hashlib.sha1(b"tree %d\0" % len(body) + body).hexdigest()


@functools.lru_cache(maxsize=None)
def versions() -> dict:
    out = {"python": sys.version.split()[0]}
    for name in ("torch", "triton", "transformers"):
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            out[name] = "not installed"
    try:
        import torch
        out["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (CPU)"
    except Exception as e:  # noqa: BLE001
        out["gpu"] = f"unknown ({e})"
    return out


def summarise(junit: str) -> tuple[dict, list[str]]:
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failures = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        if "failure" in kinds:
            counts["failed"] += 1
            failures.append(name)
        elif "error" in kinds:
            counts["errors"] += 1
            failures.append(name + " (error)")
        elif "skipped" in kinds:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts, failures


def test_files() -> list[str]:
    """Every test file under tests/, relative to the root, sorted."""
    found = []
    for folder, _, names in os.walk(os.path.join(ROOT, "tests")):
        found += [os.path.relpath(os.path.join(folder, n), ROOT) for n in names
                  if n.startswith("test_") and n.endswith(".py")]
    return sorted(found)


def file_seconds(junit: str) -> dict[str, float]:
    """Each test file's summed test time in a junit report (a testcase's classname is its module, with its test
    class where it has one)."""
    modules = {path[:-3].replace(os.sep, "."): path for path in test_files()}
    seconds: dict[str, float] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        parts = case.get("classname", "").split(".")
        path = next((modules[".".join(parts[:i])] for i in range(len(parts), 0, -1)
                     if ".".join(parts[:i]) in modules), None)
        if path is not None:
            seconds[path] = seconds.get(path, 0.0) + float(case.get("time") or 0)
    return seconds


def load_seconds(path: str = SECONDS_FILE) -> dict[str, float]:
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def file_weights(files: list[str], seconds: dict[str, float]) -> dict[str, float]:
    """The expected run time of each file: its seconds on file, else its size at the known files' seconds per
    byte (size alone where none is known)."""
    size = {p: os.path.getsize(os.path.join(ROOT, p)) for p in files}
    known = [p for p in files if p in seconds]
    per_byte = sum(seconds[p] for p in known) / max(1, sum(size[p] for p in known)) if known else 1.0
    return {p: seconds[p] if p in seconds else size[p] * per_byte for p in files}


def shard_files(index: int, count: int, seconds: dict[str, float] | None = None) -> list[str]:
    """Shard `index` (1-based) of `count`: the files dealt out heaviest first (file_weights), each to the lightest
    shard so far."""
    weights = file_weights(test_files(), load_seconds() if seconds is None else seconds)
    loads, shards = [0.0] * count, [[] for _ in range(count)]
    for path in sorted(weights, key=lambda p: (-weights[p], p)):
        lightest = loads.index(min(loads))
        shards[lightest].append(path)
        loads[lightest] += weights[path]
    return sorted(shards[index - 1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=8, help="pytest-xdist workers")
    parser.add_argument("--out", default=os.path.join(ROOT, "GPU_VERIFIED.md"))
    parser.add_argument("--junit", default=os.path.join(ROOT, ".pytest-gpu.xml"))
    parser.add_argument("--shard", help="K/N: run shard K of N and write a JSON part to --out")
    parser.add_argument("--rerun", metavar="PART", help="run again the shard of an earlier part, on that part's files")
    parser.add_argument("--merge", nargs="+", metavar="PART", help="merge the JSON parts of every shard into --out")
    parser.add_argument("--incomplete", action="store_true",
                        help="with --merge: write the record even where parts are cut or missing, marked INCOMPLETE")
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args(argv)
    if args.merge:
        return merge(args.merge, args.out, args.incomplete)

    tree = git_tree_hash(os.path.join(ROOT, "mojo_compile"))
    started = datetime.datetime.now(datetime.timezone.utc)
    shard = tuple(int(x) for x in args.shard.split("/")) if args.shard else None
    selection = shard_files(*shard) if shard else ["tests"]
    if args.rerun:
        with open(args.rerun) as f:
            earlier = json.load(f)
        shard, selection = tuple(earlier["shard"]), earlier["files"]
    cmd = [sys.executable, "-m", "pytest", *selection, "-q", "-p", "no:cacheprovider", f"--junitxml={args.junit}",
           "--durations=20",  # the slowest tests, in the log: where the shards spend the device time
           *(["-n", str(args.n)] if args.n > 0 else []), *args.pytest_args]
    progress: list[str] = []
    versions()  # read once, now: a TERM landing in torch's import would leave a half-initialised module
    failure_log = failure_log_path(args.out)  # each failure as it happens (tests/conftest.py): a cut run names them
    if os.path.exists(failure_log):
        os.remove(failure_log)
    process = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "MOJO_FAILURE_LOG": failure_log})

    def finish(code, counts, failures, cut=False, seconds=None):
        if shard:
            write_part(args.out, tree, started, cmd, code, counts, failures, shard, selection, cut, seconds or {})
        else:
            write_record(args.out, tree, started, cmd, code, counts, failures, cut=cut)

    def on_term(signum, frame):  # `timeout` ends us: record what the progress lines say, marked as cut
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second TERM must not re-enter the record's writing
        process.kill()
        counts, failures = progress_counts(progress)
        finish(None, counts, failures or logged_failures(failure_log), cut=True)
        sys.exit(124)

    signal.signal(signal.SIGTERM, on_term)
    for line in process.stdout:
        sys.stdout.write(line)
        progress.append(line)
    code = process.wait()
    seconds = {}
    if os.path.exists(args.junit):
        counts, failures = summarise(args.junit)
        seconds = file_seconds(args.junit)
    else:
        counts, failures = progress_counts(progress)
    finish(code, counts, failures, seconds=seconds)
    print(f"tree {tree}: {counts} -> {args.out}")
    return code


def write_part(out: str, tree: str, started, cmd: list, code, counts: dict, failures: list[str], shard: tuple,
               files: list[str], cut: bool, seconds_per_file: dict[str, float]) -> None:
    seconds = (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()
    part = {"tree": tree, "started": started.isoformat(), "seconds": round(seconds), "versions": versions(),
            "command": " ".join(["python", "-m", "pytest"] + cmd[3:]), "exit": code, "cut": cut,
            "shard": list(shard), "files": files, "counts": counts, "failures": failures,
            "file_seconds": {p: round(t, 1) for p, t in sorted(seconds_per_file.items())}}
    with open(out, "w") as f:
        json.dump(part, f, indent=1)


def merge(paths: list[str], out: str, incomplete: bool = False) -> int:
    """One record from the parts of every shard of one run: same tree, same versions, every file once. With
    `incomplete`, parts that are cut or do not cover tests/ still give a record, marked INCOMPLETE (not a
    verification: the device time ran out), so what did run is on file."""
    parts = []
    for path in paths:
        with open(path) as f:
            parts.append(json.load(f))
    count = parts[0]["shard"][1]
    problems = []
    if sorted(p["shard"][0] for p in parts) != list(range(1, count + 1)) or any(p["shard"][1] != count
                                                                                for p in parts):
        problems.append(f"shards {[p['shard'] for p in parts]} are not 1..{count} of {count}")
    if len({p["tree"] for p in parts}) != 1 or len({json.dumps(p["versions"], sort_keys=True) for p in parts}) != 1:
        problems.append("the parts ran different trees or versions")
    covered = sorted(f for p in parts for f in p["files"])
    if covered != test_files():
        problems.append(f"the parts cover {len(covered)} test files, tests/ has {len(test_files())}")
    if any(p["cut"] for p in parts):
        problems.append("a part was cut by a timeout")
    if problems:
        print("gpu_verify --merge: " + "; ".join(problems), file=sys.stderr)
        if not incomplete or len({p["tree"] for p in parts}) != 1:
            return 2
    counts = {k: sum(p["counts"][k] for p in parts) for k in parts[0]["counts"]}
    failures = [f for p in parts for f in p["failures"]]
    v = parts[0]["versions"]
    started = min(datetime.datetime.fromisoformat(p["started"]) for p in parts)
    commands = "; ".join(f"shard {p['shard'][0]}/{count}: `{p['command']}` ({p['seconds']} s, exit {p['exit']})"
                         for p in sorted(parts, key=lambda p: p["shard"][0]))
    _write(out, started, v, parts[0]["tree"], commands, counts, failures, problems)
    timed = {p: t for part in parts if not part["cut"] for p, t in part.get("file_seconds", {}).items()}
    if timed:  # the next shards are dealt out by these times (files of a cut part keep their earlier times)
        seconds = dict(sorted({**load_seconds(SECONDS_FILE), **timed}.items()))  # read before "w" truncates the file
        with open(SECONDS_FILE, "w") as f:
            json.dump(seconds, f, indent=1)
            f.write("\n")
    print(f"tree {parts[0]['tree']}: {counts} -> {out}" + (" (INCOMPLETE)" if problems else ""))
    return 3 if problems else 0


def failure_log_path(out: str) -> str:
    return os.path.splitext(out)[0] + ".failures.jsonl"


def logged_failures(path: str) -> list[str]:
    """The test ids in a failure log (MOJO_FAILURE_LOG), each once, in the order they failed."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        ids = [json.loads(line)["test"] for line in f if line.strip()]
    return list(dict.fromkeys(ids))


def progress_counts(lines: list[str]) -> tuple[dict, list[str]]:
    """Counts from pytest -q's progress characters (. s F E x X), and the FAILED / ERROR summary lines."""
    progress = []
    for line in lines:
        if line.startswith("="):  # the first section (FAILURES, warnings summary, ...) ends the progress lines
            break
        head = line.split(" [")[0].strip()
        if head and set(head) <= set(".sFExX"):
            progress.append(head)
    chars = "".join(progress)
    counts = {"passed": chars.count(".") + chars.count("X"), "failed": chars.count("F"), "errors": chars.count("E"),
              "skipped": chars.count("s") + chars.count("x")}
    failures = [line.split(" ", 1)[1].strip() for line in lines if line.startswith(("FAILED ", "ERROR "))]
    return counts, failures


def write_record(out: str, tree: str, started, cmd: list, code, counts: dict, failures: list[str],
                 cut: bool = False) -> None:
    seconds = (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()
    status = "cut by a timeout: counts from the progress lines" if cut else f"exit {code}"
    command = f"`{' '.join(['python', '-m', 'pytest'] + cmd[3:])}` ({seconds:.0f} s, {status})"
    _write(out, started, versions(), tree, command, counts, failures)


def _write(out: str, started, v: dict, tree: str, command: str, counts: dict, failures: list[str],
           incomplete: list[str] = ()) -> None:
    lines = [
        "# GPU verification record",
        "",
        "Written by `scripts/gpu_verify.py`: the whole of `tests/` (the conformance suite included), run on the GPU",
        "for the package tree below. A change to `mojo_compile/` is verified when this hash equals the submitted",
        "tree's (`git rev-parse HEAD:mojo_compile`) and the record shows 0 failures.",
        "",
        "| field | value |",
        "|---|---|",
        f"| date (UTC) | {started:%Y-%m-%d %H:%M} |",
        f"| GPU | {v['gpu']} |",
        f"| python / torch / triton / transformers | {v['python']} / {v['torch']} / {v['triton']} / "
        f"{v['transformers']} |",
        f"| mojo_compile tree | `{tree}` |",
        f"| command | {command} |",
        f"| passed / failed / errors / skipped | {counts['passed']} / {counts['failed']} / {counts['errors']} / "
        f"{counts['skipped']} |",
        *([f"| status | **INCOMPLETE, not a verification**: {'; '.join(incomplete)} |"] if incomplete else []),
        "",
    ]
    if failures:
        lines += ["Failures:", ""] + [f"- `{name}`" for name in failures] + [""]
    with open(out, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
