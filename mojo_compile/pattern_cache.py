"""The traced graphs of the built-in patterns, and the mask prover's answers, kept on disk between processes.

Registering a pattern traces its search function (make_fx, then canonicalisation) once per example-input set. The
built-ins have about 250 such sets, and tracing them is the largest fixed cost of a first compile. This module keeps
each trace's graph -- its nodes' ops, targets, arguments and names, which is all Inductor's `fx_to_pattern` reads --
as JSON, and rebuilds a GraphModule from it in the next process.

What is kept is the graph, not Inductor's pattern: Inductor still builds the pattern from it, and still re-traces
the search function for every candidate match with that candidate's shapes and dtypes (the soundness check that
rejects near-misses). Inductor's own serialisation (`gen_register_replacement`, `search_fn_pattern=`) skips that
re-trace, so we do not use it.

An entry is sound by construction of its key and checked before it is written:
  - the key holds the torch and Python versions, a hash of this package's source (patterns, canonicalisation rules,
    ops: any edit invalidates every entry), a hash of the registered canonicalisation rules (each op and its rule's
    name), the pattern's name and the description of each traced argument (shape, strides, dtype, device,
    requires_grad; scalars by type and value);
  - only patterns registered by this package are kept, and only while every registered (op, rule) pair is one this
    package registered (canonicalize.BUILTIN_RULES): a user's pattern or rule always traces, and is never written,
    also a rule made of this package's helpers (`register_rule(aten.gelu.default, all_arguments)`);
  - an entry is written only if the graph rebuilt from its JSON prints exactly as the traced graph does; a graph
    with anything JSON cannot name (a tensor constant, a callable that does not resolve back to itself) is not kept.

The package also ships the built-ins' traces and summaries for the torch releases and Pythons it is verified on
(pattern_data/torch-<release>-py<major.minor>.json.gz, made by `mojo-compile warm-cache --ship`, as Inductor ships
its serialised patterns), so that a first compile in an empty cache directory traces nothing either. A shipped file
is read only where it was made from this package's source (the same hash), and under the same registered rules (its
entries are named by the rules' hash, the pattern and the arguments' descriptions, as the directory's are); a stale
or foreign file is not read, and the patterns trace. Neither kind of cached trace can fuse a wrong computation: it
only names what a registration looks for, and every candidate it finds is re-traced from the search function (above).

The mask prover's answers (`remembered`) are kept the same way: each answer to a yes-or-no question, under a key
holding the versions, the package hash and the question's full text (sympy's `srepr` of the formulas compared), and
the question is compared again when the answer is read back. A proof costs tenths of a second per attention mask;
the same model's masks pose the same questions in every process.

Each built-in pattern's summary -- per example-input set, the names of the ops its Inductor pattern is made of,
and its size -- is kept as well (`summaries`): a rewrite registers only the sets whose ops all occur in the graph
(patterns/__init__.py), since registering a set costs more than matching it.

    MOJO_CACHE_DIR=dir       the cache directory (default ~/.cache/mojo_compile), shared with the tuner's choices
    MOJO_PATTERN_CACHE=0     trace and register every pattern, prove every mask (the cache is neither read nor
                             written)
"""
from __future__ import annotations

import functools
import gzip
import hashlib
import importlib
import json
import logging
import os
import sys
from typing import Any, Callable, Optional, Sequence

import torch
from torch.fx import Graph, GraphModule, Node

log = logging.getLogger("mojo_compile")

FORMAT = 1  # bump when the JSON layout changes


def cache_dir() -> str:
    return os.environ.get("MOJO_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "mojo_compile")


def enabled() -> bool:
    return os.environ.get("MOJO_PATTERN_CACHE", "1") != "0"


class Unkeepable(ValueError):
    """A graph or argument this cache cannot write down exactly."""


@functools.cache
def _package_hash() -> str:
    root = os.path.dirname(os.path.abspath(__file__))
    digest = hashlib.sha256()
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                digest.update(os.path.relpath(path, root).encode())
                with open(path, "rb") as f:
                    digest.update(f.read())
    return digest.hexdigest()


def _rules_are_ours() -> bool:
    """Whether every canonicalisation rule is one this package registered (a user's rule changes what a trace is,
    also one made of this package's helpers: the (op, rule) pair decides, not where the function lives)."""
    from .canonicalize import builtin_rules_only
    return builtin_rules_only()


_FINGERPRINTS: dict = {}  # the registered (op, rule) pairs -> their hash: asked at every trace and summary read


def _rules_fingerprint() -> str:
    """The hash of the registered (op, rule) pairs, by the op's and the rule's names: a trace is made under one set
    of rules (the built-ins' set grows as their modules load), and is read back only under the same set."""
    from .canonicalize import RULES
    registered = tuple(RULES.items())
    if registered not in _FINGERPRINTS:
        pairs = sorted((str(op), f"{getattr(rule, '__module__', '')}.{getattr(rule, '__qualname__', repr(rule))}")
                       for op, rule in registered)
        _FINGERPRINTS[registered] = hashlib.sha256(json.dumps(pairs).encode()).hexdigest()
    return _FINGERPRINTS[registered]


def keeps_traces() -> bool:
    """Whether this process writes the built-in patterns' traces (the cache is on, every rule is ours)."""
    return enabled() and _rules_are_ours()


def describe_argument(value) -> Any:
    """What of a traced argument can change its trace. Raises Unkeepable for a symbolic size."""
    if isinstance(value, torch.Tensor):
        sizes = (*value.shape, *value.stride(), value.storage_offset())
        if any(not isinstance(s, int) for s in sizes):
            raise Unkeepable("symbolic sizes")
        return ["tensor", list(value.shape), list(value.stride()), value.storage_offset(), str(value.dtype),
                str(value.device), bool(value.requires_grad)]
    if value is None or isinstance(value, (bool, int, float, str)):
        return [type(value).__name__, repr(value)]
    if isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return [type(value).__name__, str(value)]
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [describe_argument(v) for v in value]]
    if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
        raise Unkeepable("a symbolic scalar")
    raise Unkeepable(f"an argument of type {type(value).__name__}")


def _entry_parts(pattern_name: str, args: Sequence) -> Optional[list]:
    """What names a registration trace besides the versions and the package: the rules, the pattern, its arguments.
    None where the trace is not to be kept."""
    if not _rules_are_ours():
        return None
    try:
        described = [describe_argument(a) for a in args]
    except Unkeepable:
        return None
    return [_rules_fingerprint(), pattern_name, described]


def entry_key(pattern_name: str, args: Sequence) -> Optional[str]:
    """The file name of a registration trace's entry, or None where it is not to be kept."""
    parts = _entry_parts(pattern_name, args)
    return None if parts is None else _key(*parts)


def _key(*parts) -> str:
    """A cache file name: the hash of the versions, this package's source and `parts` (JSON)."""
    text = json.dumps([FORMAT, torch.__version__, sys.version, _package_hash(), *parts])
    return hashlib.sha256(text.encode()).hexdigest()


def _path(key: str) -> str:
    return os.path.join(cache_dir(), "patterns", f"{key}.json")


# -- graph <-> JSON -------------------------------------------------------------------------------------------------

_TAGGED_TYPES = {"dtype": torch.dtype, "device": torch.device, "layout": torch.layout,
                 "memory_format": torch.memory_format}


def _named(kind: str, text: str):
    if kind == "device":
        return torch.device(text)
    for value in vars(torch).values():  # torch.float32, torch.strided, torch.contiguous_format, ...
        if isinstance(value, _TAGGED_TYPES[kind]) and str(value) == text:
            return value
    raise Unkeepable(f"no torch {kind} prints as {text}")


def _encode_target(target) -> dict:
    if isinstance(target, torch._ops.OpOverload):
        return {"op": [target.namespace, target._opname, target._overloadname]}
    module, name = getattr(target, "__module__", None), getattr(target, "__qualname__", None)
    if module and name and _resolve(module, name) is target:
        return {"fn": [module, name]}
    raise Unkeepable(f"target {target!r}")


def _resolve(module: str, qualname: str):
    try:
        value = importlib.import_module(module)
        for part in qualname.split("."):
            value = getattr(value, part)
        return value
    except (ImportError, AttributeError):
        return None


def _decode_target(encoded: dict):
    if "op" in encoded:
        namespace, name, overload = encoded["op"]
        return getattr(getattr(getattr(torch.ops, namespace), name), overload)
    target = _resolve(*encoded["fn"])
    if target is None:
        raise Unkeepable(f"{encoded['fn']} does not resolve")
    return target


def _encode(value) -> Any:
    if isinstance(value, Node):
        return {"node": value.name}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, tuple):
        return {"tuple": [_encode(v) for v in value]}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"dict": [[k, _encode(v)] for k, v in value.items()]}
    if isinstance(value, slice):
        return {"slice": [_encode(value.start), _encode(value.stop), _encode(value.step)]}
    for kind, cls in _TAGGED_TYPES.items():
        if isinstance(value, cls):
            return {kind: str(value)}
    raise Unkeepable(f"an argument of type {type(value).__name__}")


def _decode(value, nodes: dict) -> Any:
    if isinstance(value, list):
        return [_decode(v, nodes) for v in value]
    if not isinstance(value, dict):
        return value
    (kind, body), = value.items()
    if kind == "node":
        return nodes[body]
    if kind == "tuple":
        return tuple(_decode(v, nodes) for v in body)
    if kind == "dict":
        return {k: _decode(v, nodes) for k, v in body}
    if kind == "slice":
        return slice(*(_decode(v, nodes) for v in body))
    return _named(kind, body)


def graph_to_json(graph: Graph) -> list:
    nodes = []
    for node in graph.nodes:
        if node.op not in ("placeholder", "call_function", "output"):
            raise Unkeepable(f"a {node.op} node")
        target = node.target if node.op == "placeholder" else (
            None if node.op == "output" else _encode_target(node.target))
        nodes.append([node.op, node.name, target, _encode(node.args), _encode(node.kwargs)])
    return nodes


def graph_from_json(nodes: list) -> GraphModule:
    from torch.fx._lazy_graph_module import _LazyGraphModule  # code generated when first called, never here

    graph, by_name = Graph(), {}
    for op, name, target, args, kwargs in nodes:
        if op == "call_function":
            target = _decode_target(target)
        elif op == "output":
            target = "output"
        node = graph.create_node(op, target, _decode(args, by_name), _decode(kwargs, by_name), name=name)
        if node.name != name:
            raise Unkeepable(f"node {name} came back as {node.name}")
        by_name[name] = node
    return _LazyGraphModule(torch.nn.Module(), graph)


# -- the cache ------------------------------------------------------------------------------------------------------

def load(key: str) -> Optional[GraphModule]:
    try:
        with open(_path(key)) as f:
            return graph_from_json(json.load(f))
    except FileNotFoundError:
        return None
    except Exception as e:  # a damaged or foreign entry: trace instead (and overwrite it)
        log.debug("mojo: pattern cache entry %s unreadable (%s: %s); tracing", key, type(e).__name__, e)
        return None


def _keepable(what: str, gm: GraphModule) -> Optional[str]:
    """The traced graph as JSON text where that rebuilds a graph that prints identically; None otherwise (logged)."""
    try:
        text = json.dumps(graph_to_json(gm.graph))
        if str(graph_from_json(json.loads(text)).graph) != str(gm.graph):
            raise Unkeepable("the rebuilt graph prints differently")
    except Unkeepable as e:
        log.debug("mojo: pattern trace %s not cached: %s", what, e)
        return None
    return text


def store(key: str, gm: GraphModule) -> Optional[GraphModule]:
    """Write the traced graph under `key` if its JSON rebuilds a graph that prints identically, and return that
    rebuilt graph (what a later read gives); None where it is not kept."""
    text = _keepable(key, gm)
    if text is None:
        return None
    _write(_path(key), text)  # (a directory not writable: kept for no later process, still read back the same way)
    return graph_from_json(json.loads(text))


def _write(path: str, text: str) -> bool:
    """Write a cache file atomically (a concurrent reader sees the old file or the whole new one). False where the
    directory is not writable (a read-only home): recomputing every time is correct, only slower."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        log.debug("mojo: cache not writable (%s)", e)
        return False
    return True


def traced(pattern_name: str, trace: Callable[[Callable, Sequence], GraphModule], fn: Callable,
           args: Sequence) -> GraphModule:
    """`trace(fn, args)`, from the cache directory or the shipped traces where either holds this pattern with these
    arguments."""
    parts = _entry_parts(pattern_name, args) if enabled() else None
    if parts is None:
        return trace(fn, args)
    key = _key(*parts)
    gm = load(key)
    if gm is None:
        gm = _shipped_trace(parts)
    if gm is None:
        gm = trace(fn, args)
        # Every process registers a kept trace in its rebuilt form, whether it traced or read it: Inductor's
        # duplicate check prints the whole module, whose name (the search function's, or GraphModule) would
        # otherwise depend on where the graph came from.
        kept = store(key, gm)
        if kept is not None:
            gm = kept
    if _RECORDING is not None:
        text = _keepable(pattern_name, gm)  # (one not kept is traced at first use, as a directory entry not kept)
        if text is not None:
            _RECORDING["entries"][json.dumps(parts)] = json.loads(text)
    return gm


# -- the traces shipped with the package ----------------------------------------------------------------------------

SHIPPED_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pattern_data")
_RECORDING: Optional[dict] = None  # {"entries": ..., "summaries": ...} while ship() collects them


def shipped_name() -> str:
    """The shipped file for this torch release and Python (a local build tag, `+cpu` or `+cu130`, does not change a
    trace: the patterns trace on the CPU, and every argument's device is in the entry's name)."""
    release = torch.__version__.split("+")[0]
    return f"torch-{release}-py{sys.version_info.major}.{sys.version_info.minor}.json.gz"


@functools.cache
def _shipped() -> Optional[dict]:
    """The traces shipped for this torch release and Python, where they were made from this package's source; None
    otherwise (a stale file is not read: the patterns trace, as in a fresh cache directory)."""
    path = os.path.join(SHIPPED_DIR, shipped_name())
    try:
        with gzip.open(path, "rt") as f:
            data = json.load(f)
        if not (isinstance(data, dict) and isinstance(data.get("entries"), dict)
                and isinstance(data.get("summaries"), dict)):
            raise ValueError("not a file of shipped traces")
        # in summaries()'s form once here, not at each of a compile's hundreds of reads
        data["summaries"] = {rules: {name: [(frozenset(targets), size) for targets, size in sets]
                                     for name, sets in held.items()} for rules, held in data["summaries"].items()}
    except FileNotFoundError:
        return None
    except Exception as e:  # noqa: BLE001 - a damaged file: trace, as without one
        log.debug("mojo: shipped pattern traces %s unreadable (%s: %s)", path, type(e).__name__, e)
        return None
    if data.get("format") != FORMAT or data.get("package") != _package_hash():
        log.debug("mojo: shipped pattern traces %s were made from another source of mojo_compile; tracing", path)
        return None
    return data


def _shipped_trace(parts: list) -> Optional[GraphModule]:
    data = _shipped() if _RECORDING is None else None
    nodes = None if data is None else data["entries"].get(json.dumps(parts))
    if nodes is None:
        return None
    try:
        return graph_from_json(nodes)
    except Exception as e:  # noqa: BLE001 - an entry this process cannot rebuild (an op it lacks): trace it
        log.debug("mojo: shipped trace of %s unreadable (%s: %s); tracing", parts[1], type(e).__name__, e)
        return None


def _shipped_summaries(rules: str) -> dict:
    data = _shipped() if _RECORDING is None else None
    return {} if data is None else data["summaries"].get(rules, {})


def ship(directory: str = SHIPPED_DIR) -> tuple[str, int]:
    """Trace every built-in pattern's input sets in a fresh cache directory, as a first compile does, and write
    their graphs and summaries into `directory` as this torch release's and Python's shipped file (read by every
    later first compile of this package's source: Inductor ships its serialised patterns the same way). Returns the
    file's path and the number of traces. The caller's process must hold no user canonicalisation rule."""
    import tempfile

    from . import patterns

    global _RECORDING
    if not keeps_traces():
        raise RuntimeError("the pattern cache is off, or a canonicalisation rule mojo_compile did not register is "
                           "registered: nothing to ship")
    previous = os.environ.get("MOJO_CACHE_DIR")
    with tempfile.TemporaryDirectory() as fresh:
        os.environ["MOJO_CACHE_DIR"] = fresh
        _RECORDING = {"entries": {}, "summaries": {}}  # (while set, nothing shipped is read: every set traces)
        try:
            patterns.forget_traces()
            patterns.warm_cache()
            recorded = _RECORDING
        finally:
            _RECORDING = None
            patterns.forget_traces()
            if previous is None:
                os.environ.pop("MOJO_CACHE_DIR", None)
            else:
                os.environ["MOJO_CACHE_DIR"] = previous
    data = {"format": FORMAT, "torch": torch.__version__, "python": sys.version.split()[0],
            "package": _package_hash(), **recorded}
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, shipped_name())
    text = json.dumps(data, sort_keys=True).encode()
    with open(path, "wb") as f:
        f.write(gzip.compress(text, compresslevel=9, mtime=0))  # (mtime 0: the same traces, the same bytes)
    _shipped.cache_clear()
    return path, len(recorded["entries"])


# -- the patterns' summaries ----------------------------------------------------------------------------------------

_SUMMARIES: dict = {}  # file -> {"loaded": what it held when read, "new": what this process learnt since}


def _summaries_file() -> Optional[dict]:
    """This cache directory's summaries in memory (read on first use), or None where none are kept."""
    if not enabled() or not _rules_are_ours():  # (a user's canonicalisation rule changes what a trace is made of)
        return None
    path = os.path.join(cache_dir(), "summaries", f"{_key(_rules_fingerprint(), 'summaries')}.json")
    if path not in _SUMMARIES:
        _SUMMARIES[path] = {"path": path, "loaded": _read_summaries(path), "new": {}}
    return _SUMMARIES[path]


def summaries() -> dict:
    """{built-in pattern name: [(targets, size) per example-input set]}, as an earlier process registered them (or
    the shipped traces' maker did): the names of the ops each set's pattern is made of, and its size. Read once per
    process and cache directory; {} where none is kept. A summary is keyed like a trace (the versions and this
    package's source), so it describes the traces this process would make."""
    held = _summaries_file()
    if held is None:
        return {}
    return {**_shipped_summaries(_rules_fingerprint()), **held["loaded"], **held["new"]}


def _read_summaries(path: str) -> dict:
    try:
        with open(path) as f:
            raw = json.load(f)
        return {name: [(frozenset(targets), size) for targets, size in sets] for name, sets in raw.items()
                if all(isinstance(t, list) and all(isinstance(x, str) for x in t) and isinstance(size, int)
                       for t, size in sets)}
    except FileNotFoundError:
        return {}
    except Exception as e:  # a damaged file: every set is registered (and the file written again)
        log.debug("mojo: pattern summaries unreadable (%s: %s)", type(e).__name__, e)
        return {}


def note_summary(name: str, sets: list) -> None:
    """Remember a built-in pattern's summary: [(targets, size) per example-input set], all registered."""
    held = _summaries_file()
    if held is None:
        return
    if _RECORDING is not None:
        _RECORDING["summaries"].setdefault(_rules_fingerprint(), {})[name] = [[sorted(t), size] for t, size in sets]
    if summaries().get(name) != sets:  # (one the shipped traces hold is not written again)
        held["new"][name] = sets


def save_summaries() -> None:
    """Write what this process learnt, merged with what the file holds now (another process may have added)."""
    held = _summaries_file()
    if held is None or not held["new"]:
        return
    merged = {**_read_summaries(held["path"]), **held["new"]}
    text = json.dumps({name: [[sorted(targets), size] for targets, size in sets] for name, sets in merged.items()})
    if _write(held["path"], text):
        held["loaded"], held["new"] = merged, {}


# -- the mask prover's answers --------------------------------------------------------------------------------------

_ANSWERS: dict = {}  # (kind, question) -> answer, within this process


def remembered(kind: str, question: str, answer: Callable[[], bool]) -> bool:
    """`answer()`, the deterministic yes-or-no answer to `question` (its full text: everything the answer depends
    on besides this package and the versions), from memory or the disk where it was answered before."""
    if (kind, question) in _ANSWERS:
        return _ANSWERS[kind, question]
    key = _answer_key(kind, question) if enabled() else None
    result = _load_answer(key, question) if key is not None else None
    if result is None:
        result = bool(answer())
        if key is not None:
            _write(_answer_path(key), json.dumps({"question": question, "answer": result}))
    _ANSWERS[kind, question] = result
    return result


def _answer_key(kind: str, question: str) -> str:
    import sympy
    return _key(sympy.__version__, kind, question)


def _answer_path(key: str) -> str:
    return os.path.join(cache_dir(), "answers", f"{key}.json")


def _load_answer(key: str, question: str) -> Optional[bool]:
    try:
        with open(_answer_path(key)) as f:
            entry = json.load(f)
        if entry["question"] == question and isinstance(entry["answer"], bool):
            return entry["answer"]
    except FileNotFoundError:
        return None
    except Exception as e:  # a damaged entry: answer again (and overwrite it)
        log.debug("mojo: cached answer %s unreadable (%s: %s)", key, type(e).__name__, e)
    return None
