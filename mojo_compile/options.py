"""Options of the mojo backend: `torch.compile(..., options={...})`, then environment variables, then defaults.

    target          ttx | torch_npu | torch             env MOJO_BACKEND      default: from the inputs' device
    inner_compiler  inductor | eager                     env MOJO_INNER        default: inductor
    disable         pattern names / globs / families     env MOJO_DISABLE      default: none (comma-separated)
    dump_dir        write graphs and the report there    env MOJO_DUMP_DIR     default: off

Any other key is an Inductor config name (e.g. "max_autotune", "triton.cudagraphs") and is forwarded to Inductor,
as is `mode=` ("reduce-overhead", "max-autotune", ...).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional

from . import lowering

INNER_COMPILERS = ("inductor", "eager")
MOJO_KEYS = ("target", "inner_compiler", "disable", "dump_dir")


class OptionError(ValueError):
    """An option the backend cannot honour."""


@dataclass(frozen=True)
class Options:
    target: Optional[str] = None  # None: chosen from the device of the graph's inputs
    inner_compiler: str = "inductor"
    disable: tuple[str, ...] = ()
    dump_dir: Optional[str] = None
    mode: Optional[str] = None
    inductor_config: dict[str, Any] = field(default_factory=dict)

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
            disable = [d for d in os.environ.get("MOJO_DISABLE", "").split(",") if d.strip()]
        if isinstance(disable, str):
            disable = [disable]
        dump_dir = options.pop("dump_dir", None) or os.environ.get("MOJO_DUMP_DIR") or None
        inductor_config = _inductor_config(mode, options, inner)
        return Options(target, inner, tuple(d.strip() for d in disable), dump_dir, mode, inductor_config)


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
