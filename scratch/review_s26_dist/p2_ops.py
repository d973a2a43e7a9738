from dh import *


def body(rank, world):
    import faulthandler; faulthandler.dump_traceback_later(60, exit=True)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    mesh = init_device_mesh("cpu", (world,))
    ops = torch.ops.mojo
    g = torch.Generator().manual_seed(0)
    B, H, S, D = 2, 4, 6, 8
    q, k, v = (torch.randn(B, H, S, D, generator=g) for _ in range(3))
    bias = torch.randn(S, S, generator=g)
    for mshape in ((S, S),):
        m = bias.reshape(mshape) if len(mshape) > 1 else bias[0]
        ref = ops.attention(q, k, v, m, None, 0.35, False, 0, 0.0, None, "torch")[0]
        args = [distribute_tensor(t, mesh, [Shard(1)]) for t in (q, k, v)] + [distribute_tensor(m, mesh, [Replicate()])]
        try:
            got = ops.attention(*args, None, 0.35, False, 0, 0.0, None, "torch")[0]
            print(rank, mshape, "maxdiff", (got.full_tensor() - ref).abs().max().item(), flush=True)
        except Exception as ex:
            print(rank, mshape, "FAILS", type(ex).__name__, str(ex).splitlines()[0][:250], flush=True)
    # norms without weight / bias on sequence shards, with backward
    x = torch.randn(2, 8, 16, generator=g)
    for name, fn in (("rms_norm w=None", lambda x: ops.rms_norm(x, None, 1e-6, 0.0, "output", "torch")[0]),
                     ("layer_norm no w/b", lambda x: ops.layer_norm(x, None, None, 1e-5, "torch")[0])):
        xr = x.clone().requires_grad_()
        ref = fn(xr); ref.backward(torch.ones_like(ref))
        xd = distribute_tensor(x, mesh, [Shard(1)]).requires_grad_()
        try:
            got = fn(xd); got.backward(torch.ones_like(got))
            if rank == 0: print(name, (got.full_tensor() - ref).abs().max().item(), (xd.grad.full_tensor() - xr.grad).abs().max().item(), flush=True)
        except Exception as ex:
            if rank == 0: print(name, "FAILS", type(ex).__name__, str(ex).splitlines()[0][:250], flush=True)


if __name__ == "__main__":
    spawn(body)
