"""What a lowering target is: a table from Mojo op name to an implementation and its `supports` check."""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional


def _always(*args) -> Optional[str]:
    return None


class Impl(NamedTuple):
    """`fn` takes the op's arguments (without `target`). `supports` takes the same arguments (fake tensors at compile
    time, real ones at run time) and returns None when `fn` can take them, else the reason it cannot."""
    fn: Callable
    supports: Callable[..., Optional[str]] = _always
