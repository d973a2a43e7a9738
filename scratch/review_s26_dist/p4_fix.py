from dh import *


def _fix():
    from mojo_compile import sharding
    from mojo_compile.ops import attention as A

    def mask_role(spec, dim):
        from torch.distributed.tensor import Replicate, Shard
        shape = sharding.shape_of(spec)
        aligned = dim - (4 - len(shape))  # the mask broadcasts from the right against [B, H, Sq, Skv]
        return Replicate() if aligned < 0 or shape[aligned] == 1 else Shard(aligned)
    qkv = {**A._QKV, "mask": mask_role}
    sharding.register_local_sharding(torch.ops.mojo.attention.default, qkv, [sharding.SAME, sharding.SAME], dims=A._heads)
    sharding.register_local_sharding(torch.ops.mojo.attention_backward.default,
                                     {**qkv, "grad_out": sharding.SAME, "out": sharding.SAME, "lse": sharding.SAME},
                                     [sharding.SAME, sharding.SAME, sharding.SAME, A._sinks], dims=A._heads)


def body(rank, world):
    import faulthandler; faulthandler.dump_traceback_later(60, exit=True)
    _fix()
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    mesh = init_device_mesh("cpu", (world,))
    ops = torch.ops.mojo
    g = torch.Generator().manual_seed(0)
    import sys as _s; cases = {"a": (4, 2, (4, 2)), "b": (6, 6, (6, 6)), "c": (6, 6, (6,)), "d": (6, 6, (1, 6, 6))}
    for ql, kl, mshape in [cases[c] for c in os.environ["CASES"]]:
        q = torch.randn(2, 4, ql, 8, generator=g)
        k, v = torch.randn(2, 4, kl, 8, generator=g), torch.randn(2, 4, kl, 8, generator=g)
        m = torch.randn(*mshape, generator=g)
        ref = ops.attention(q, k, v, m, None, 0.35, False, 0, 0.0, None, "torch")[0]
        mp_ = [Shard(1)] if len(mshape) == 4 else [Replicate()]
        args = [distribute_tensor(t, mesh, [Shard(1)]) for t in (q, k, v)] + [distribute_tensor(m, mesh, mp_)]
        got = ops.attention(*args, None, 0.35, False, 0, 0.0, None, "torch")[0]
        if rank == 0: print(mshape, "maxdiff", (got.full_tensor() - ref).abs().max().item(), got.placements, flush=True)


if __name__ == "__main__":
    spawn(body)
