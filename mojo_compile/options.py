"""Options of the mojo backend: `torch.compile(..., options={...})`, then environment variables, then defaults.

    target          ttx | torch_npu | torch             env MOJO_BACKEND      default: from the inputs' device
    inner_compiler  inductor | eager                     env MOJO_INNER        default: inductor
    disable         pattern names / globs / families     env MOJO_DISABLE      default: none (comma-separated)
                    ("=name": that exact name only, not a family of that name)
    dump_dir        write graphs and the report there    env MOJO_DUMP_DIR     default: off
    backward_piece_mb  a training graph is compiled in     env MOJO_BACKWARD_PIECE_MB  default: 256
                    pieces of about this many MiB of parameter gradients (pieces.py); 0: whole

A bad option is an OptionError when the options are parsed (as the backend starts a compile): an unknown target or inner
compiler, a `disable` entry that matches no registered pattern name or family, a `dump_dir` that is a file or cannot
be created. Raised inside torch.compile, it reaches the caller as itself (not wrapped in Dynamo's
BackendCompilerFailed), so `except mojo_compile.OptionError` catches it.

Any other key is an Inductor config name (e.g. "max_autotune", "triton.cudagraphs") and is forwarded to Inductor,
as is `mode=` ("reduce-overhead", "max-autotune", ...).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional

from . import lowering

INNER_COMPILERS = ("inductor", "eager")
MOJO_KEYS = ("target", "inner_compiler", "disable", "dump_dir", "backward_piece_mb")


def _dynamo_passes_through() -> type:
    """Dynamo wraps what a backend raises in BackendCompilerFailed (`backend='mojo' raised: ...`, with advice for
    reporting Dynamo bugs) unless it is a ShortenTraceback (torch/_dynamo/output_graph.py, `_call_user_compiler`
    and convert_frame: re-raised as is, in every torch since 2.6)."""
    try:
        from torch._dynamo.exc import ShortenTraceback
    except ImportError:
        return Exception
    return ShortenTraceback


def _no_real_stack(self):
    raise AttributeError("real_stack")


class OptionError(ValueError, _dynamo_passes_through()):
    """An option the backend cannot honour. A ValueError; also the exception type Dynamo lets through unwrapped, so
    an OptionError raised while torch.compile runs the backend reaches the caller as itself, with its own message."""

    def __init__(self, *args):
        Exception.__init__(self, *args)
        self.first_useful_frame = None  # ShortenTraceback's field (see remove_dynamo_frames)

    # Dynamo attaches the user's stack (`real_stack`) to an exception leaving a frame it traces, and then appends
    # "from user code: ..." and "Set TORCHDYNAMO_VERBOSE=1 ... reporting a bug to PyTorch" to the message of any
    # exception that has one: a bad option is no bug, and its message names the option. Have none.
    real_stack = property(_no_real_stack, lambda self, value: None)

    def __str__(self) -> str:
        return super().__str__().rstrip("\n")  # Dynamo appends a newline to every message it passes on

    def remove_dynamo_frames(self) -> "OptionError":
        """Called by Dynamo before it re-raises: the traceback from the backend down (the frames above are Dynamo's
        own), unless TORCHDYNAMO_VERBOSE=1."""
        try:
            from torch._dynamo import config

            if config.verbose:
                return self
        except ImportError:
            pass
        tb = self.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_name != "mojo_backend":
            tb = tb.tb_next
        return self.with_traceback(tb) if tb is not None else self


@dataclass(frozen=True)
class Options:
    target: Optional[str] = None  # None: chosen from the device of the graph's inputs
    inner_compiler: str = "inductor"
    disable: tuple[str, ...] = ()
    dump_dir: Optional[str] = None
    mode: Optional[str] = None
    inductor_config: dict[str, Any] = field(default_factory=dict)
    backward_piece_mb: float = 256.0

    @staticmethod
    def parse(mode: Optional[str] = None, options: Optional[dict] = None, **extra: Any) -> "Options":
        options = dict(options or {})
        for key, value in extra.items():  # tolerate keyword arguments other callers pass (HF CompileConfig...)
            if key in MOJO_KEYS:
                options.setdefault(key, value)
        target = options.pop("target", None) or os.environ.get("MOJO_BACKEND") or None
        if target is not None and target not in lowering.targets():
            raise OptionError(f"unknown mojo target {target!r} (options['target'] or MOJO_BACKEND); "
                              f"choose one of {', '.join(lowering.targets())}")
        inner = options.pop("inner_compiler", None) or os.environ.get("MOJO_INNER") or "inductor"
        if inner not in INNER_COMPILERS:
            raise OptionError(f"unknown inner_compiler {inner!r}; choose one of {', '.join(INNER_COMPILERS)}")
        disable = options.pop("disable", None)
        if disable is None:
            disable = os.environ.get("MOJO_DISABLE", "").split(",")
        if isinstance(disable, str):
            disable = [disable]
        if any(not isinstance(d, str) for d in disable):
            raise OptionError(f"disable must be pattern names, globs or families (strings), got {disable!r}")
        disable = tuple(d.strip() for d in disable if d.strip())
        _check_disable(disable)
        dump_dir = options.pop("dump_dir", None) or os.environ.get("MOJO_DUMP_DIR") or None
        if dump_dir is not None:
            _check_dump_dir(os.fspath(dump_dir))
        piece_mb = _piece_mb(options.pop("backward_piece_mb", None), os.environ.get("MOJO_BACKWARD_PIECE_MB"))
        inductor_config = _inductor_config(mode, options, inner)
        return Options(target, inner, disable, dump_dir, mode, inductor_config, piece_mb)


def _piece_mb(option, env) -> float:
    """backward_piece_mb: a number >= 0 (MiB; 0 keeps every graph whole), from the option, else the environment."""
    from .pieces import DEFAULT_PIECE_MB

    value, where = (option, "options['backward_piece_mb']") if option is not None else \
        (env, "MOJO_BACKWARD_PIECE_MB") if env not in (None, "") else (DEFAULT_PIECE_MB, "")
    try:
        mb = float(value)
    except (TypeError, ValueError):
        mb = float("nan")
    if isinstance(value, bool) or not mb >= 0 or mb == float("inf"):
        raise OptionError(f"backward_piece_mb ({where}) must be a number of MiB >= 0 (0: never split), got {value!r}")
    return mb


def _check_disable(disable: tuple) -> None:
    """Each entry must turn off something: a pattern name, a glob over names, or a family (a typo would silently
    disable nothing)."""
    if not disable:
        return
    from . import patterns

    for entry in disable:
        if not patterns.disable_matches(entry):
            close = patterns.closest_names(entry)
            hint = (f"did you mean {' or '.join(repr(c) for c in close)}?" if close else
                    f"families are {', '.join(patterns.families())}")
            raise OptionError(f"disable entry {entry!r} (options['disable'] or MOJO_DISABLE) matches no registered "
                              f"pattern name or family; {hint} (`mojo-compile patterns` lists them)")


def _check_dump_dir(dump_dir: str) -> None:
    """dump_dir must be a directory or creatable as one (it is created at the first dump)."""
    where = "(options['dump_dir'] or MOJO_DUMP_DIR)"
    if os.path.exists(dump_dir) and not os.path.isdir(dump_dir):
        raise OptionError(f"dump_dir {dump_dir!r} {where} exists and is not a directory")
    parent = os.path.abspath(dump_dir)
    while not os.path.exists(parent):  # the nearest existing ancestor is where the new directories would go
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise OptionError(f"dump_dir {dump_dir!r} {where} cannot be created: {parent!r} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        verb = "is not writable" if parent == os.path.abspath(dump_dir) else "cannot be created"
        raise OptionError(f"dump_dir {dump_dir!r} {where} {verb}: no permission to write in {parent!r}")


def _inductor_config(mode: Optional[str], options: dict, inner: str) -> dict:
    if inner != "inductor":
        if options:
            raise OptionError(f"options {sorted(options)} are not mojo options ({', '.join(MOJO_KEYS)}) and "
                              f"inner_compiler={inner!r} takes no Inductor config")
        return {}
    from torch._inductor import config as inductor_config, list_mode_options

    config = {}
    if mode is not None and mode != "default":
        try:
            config.update(list_mode_options(mode))
        except RuntimeError as e:
            raise OptionError(f"unknown mode {mode!r}: {e}") from e
    for key, value in options.items():
        if not _has_config(inductor_config, key):
            raise OptionError(f"unknown option {key!r}: mojo options are {', '.join(MOJO_KEYS)}; "
                              f"any other key must be an Inductor config name")
        config[key] = value
    return config


def _has_config(config, dotted: str) -> bool:
    obj = config
    for part in dotted.split("."):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True
