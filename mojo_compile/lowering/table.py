"""What a lowering target is: a table from Mojo op name to an implementation and its `supports` check."""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional


def _always(*args) -> Optional[str]:
    return None


def _never(*args) -> bool:
    return False


def _silent(*args) -> str:
    return ""


class Impl(NamedTuple):
    """`fn` takes the op's arguments (without `target`). `supports` takes the same arguments (fake tensors at compile
    time, real ones at run time) and returns None when `fn` can take them, else the reason it cannot.
    `traceable(*args)` says whether `fn` can be traced with these fake arguments (torch ops, Triton kernels launched
    through `wrap_triton` with static launch parameters): then the inner compiler sees inside the op instead of
    calling it as a black box. `describe(*args)`: for the report, which of its kernels `fn` will run on these
    arguments, where it has several ("" otherwise)."""
    fn: Callable
    supports: Callable[..., Optional[str]] = _always
    traceable: Callable[..., bool] = _never
    describe: Callable[..., str] = _silent
