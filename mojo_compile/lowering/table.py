"""What a lowering target is: a table from Mojo op name to an implementation and its `supports` check, each entry
registered beside its implementation, in the module that defines the op (lowering.register_impl; `Table.implement`
for a target's own module that fills its table itself)."""
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


class Table(dict):
    """A target's table: op name -> Impl. Entries are added by `implement`, next to each implementation."""

    def __init__(self, target: str):
        super().__init__()
        self.target = target

    def implement(self, op: str, fn: Callable, *, supports: Callable[..., Optional[str]] = _always,
                  traceable: Callable[..., bool] = _never, describe: Callable[..., str] = _silent) -> Callable:
        """Register `fn` as `op`'s implementation on this target (see Impl for the rest); returns fn."""
        if op in self:
            raise ValueError(f"mojo: {op!r} is implemented twice on target {self.target!r}")
        self[op] = Impl(fn, supports, traceable, describe)
        return fn
