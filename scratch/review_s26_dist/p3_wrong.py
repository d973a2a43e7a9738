from dh import *


def body(rank, world):
    import faulthandler; faulthandler.dump_traceback_later(60, exit=True)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    mesh = init_device_mesh("cpu", (world,))
    ops = torch.ops.mojo
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 4, 8, generator=g)
    k, v = torch.randn(1, 2, 2, 8, generator=g), torch.randn(1, 2, 2, 8, generator=g)
    m = torch.randn(4, 2, generator=g)
    ref = ops.attention(q, k, v, m, None, 0.35, False, 0, 0.0, None, "torch")[0]
    args = [distribute_tensor(t, mesh, [Shard(1)]) for t in (q, k, v)] + [distribute_tensor(m, mesh, [Replicate()])]
    got = ops.attention(*args, None, 0.35, False, 0, 0.0, None, "torch")[0]
    print(rank, "maxdiff", (got.full_tensor() - ref).abs().max().item(), flush=True)


if __name__ == "__main__":
    spawn(body)
