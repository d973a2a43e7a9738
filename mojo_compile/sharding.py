"""DTensor sharding strategies for the Mojo ops: under tensor or sequence parallelism (`parallelize_module`, DTensor
activations) a Mojo op runs on each rank's shards wherever its math is local to them, and DTensor redistributes its
inputs otherwise. Each op module declares its ops' strategies beside them with `register_local_sharding`, through
torch's public API for custom-op sharding (`torch.distributed.tensor.experimental.register_sharding`).

A strategy is a list of layouts an op accepts: every input replicated (always, so DTensor can fall back to it), and
one layout per dim the op's math is independent along. An op names, for each tensor argument and output, its
`Role` along such a dim:

    SAME      sharded along that dim, as the reference tensor is (a token dim of a norm's rows, the heads of q / k)
    REPLICATE every rank holds all of it (a norm's weight, RoPE's cos / sin)
    PARTIAL   each rank holds a partial sum (a weight's gradient summed over the rank's tokens)
    a callable (the spec, the dim) -> placement, for a tensor whose layout depends on its shape (a mask with one
              head broadcast over all of them)

Where torch.distributed (or its DTensor) is missing, registering is a no-op: the ops never meet a DTensor there.
"""
from __future__ import annotations

import logging
from typing import Callable, Optional, Sequence, Union


log = logging.getLogger("mojo_compile")

SAME, REPLICATE, PARTIAL = "same", "replicate", "partial"
Role = Union[str, Callable, None]


def _placements():
    from torch.distributed.tensor import Partial, Replicate, Shard
    return Shard, Replicate, Partial


def _placement(role: Role, spec, dim: Optional[int]):
    """The placement of a tensor argument of `role` in the layout sharded along `dim` (None: all replicated)."""
    Shard, Replicate, Partial = _placements()
    if role is None or spec is None:
        return None  # not a tensor, or an optional tensor left out
    if dim is None:
        return Replicate()
    if callable(role):
        return role(spec, dim)
    return {SAME: lambda: Shard(dim), REPLICATE: Replicate, PARTIAL: Partial}[role]()


def register_local_sharding(op, inputs: dict[str, Role], outputs: Union[Sequence[Role], Callable[..., Sequence[Role]]],
                            dims: Callable[..., Sequence[int]]) -> None:
    """Register DTensor's strategy for `op` (an OpOverload): all replicated, and for each dim that `dims(**args)`
    gives (args by schema name, tensors as DTensor specs), the layout the roles say. `inputs` names the op's tensor
    arguments (any other argument is not a tensor); `outputs` gives each output's role (or is a function of the
    arguments that does, where a reduction decides)."""
    try:
        from torch.distributed.tensor.experimental import register_sharding
        _placements()
    except ImportError as e:  # a torch without distributed: no DTensor either
        log.debug("mojo: no DTensor sharding for %s: %s", op, e)
        return
    names = [a.name for a in op._schema.arguments]
    defaults = {a.name: a.default_value for a in op._schema.arguments if a.has_default_value()}

    def strategy(*args, **kwargs):
        given = dict(zip(names, args), **kwargs)  # the call's arguments (DTensor leaves defaults out)
        bound = {**defaults, **given}
        layouts = []
        out_roles = outputs(**bound) if callable(outputs) else outputs
        for dim in (None, *dims(**bound)):
            outs = [_placement(role, True, dim) for role in out_roles]
            ins = [_placement(inputs.get(name), given.get(name), dim) for name in names if name in given]
            layouts.append((outs, ins))
        return layouts

    register_sharding(op)(strategy)


# ---------------------------------------------------------------------------------------------- common dim rules
def token_dims(x, **_) -> range:
    """The dims of a norm's rows but the last: each row is normalised alone (its per-row statistics, shaped like the
    rows without the last dim, shard along the same dims)."""
    return range(x.ndim - 1)


def mesh_size(spec) -> int:
    return spec.mesh.size()


def shape_of(spec) -> tuple:
    return tuple(spec.tensor_meta.shape) if spec.tensor_meta is not None else ()
