from dh import *


def body(rank, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    mesh = init_device_mesh("cpu", (world,))
    g = torch.Generator().manual_seed(0)
    B, H, S, D = 2, 4, 6, 8
    q, k, v = (torch.randn(B, H, S, D, generator=g) for _ in range(3))
    bias = torch.randn(S, S, generator=g)

    def manual(q, k, v, m):
        w = torch.matmul(q, k.transpose(2, 3)) * D ** -0.5
        w = w + m
        w = torch.softmax(w, dim=-1, dtype=torch.float32 if q.dtype == torch.float32 else q.dtype)
        return torch.matmul(w, v)

    for mshape in ((1, 1, S, S), (S, S), (1, S, S)):
        m = bias.reshape(mshape)
        torch._dynamo.reset(); mojo_compile.reset_report()
        mk = lambda: [distribute_tensor(t, mesh, [Shard(1)]).requires_grad_() for t in (q, k, v)] + \
            [distribute_tensor(m, mesh, [Replicate()])]
        args = mk()
        e = manual(*args)
        args2 = mk()
        try:
            c = comp(manual)(*args2)
        except Exception as ex:
            if rank == 0: print(mshape, "COMPILED FAILS", type(ex).__name__, str(ex)[:300], sites(), flush=True)
            continue
        d = manual(*[t.double() for t in (q, k, v)], m.double())
        if rank == 0: print(mshape, verdict("out", c, e, d), sites(), c.placements, flush=True)


if __name__ == "__main__":
    spawn(body)
