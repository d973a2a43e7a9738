"""Probe helpers for distributed probes: spawn 2 gloo ranks, compare compiled vs eager vs fp64."""
import os, sys, socket, traceback
sys.path[:0] = ["/work/main/tests", "/work/main"]
os.environ.setdefault("MOJO_CACHE_DIR", "/tmp/dist_cache")
import conftest  # noqa: F401
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import mojo_compile  # noqa: F401


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank, world, port, body):
    import faulthandler, signal
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    print(f'rank {rank} up', flush=True)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        body(rank, world)
    except BaseException:
        print(f"rank {rank}: {traceback.format_exc()}", flush=True)
        raise
    finally:
        dist.destroy_process_group()


def spawn(body, world=2):
    mp.spawn(_entry, args=(world, _free_port(), body), nprocs=world)


def comp(fn, target="torch", inner="eager", **kw):
    return torch.compile(fn, backend="mojo", options={"target": target, "inner_compiler": inner}, **kw)


def full(t):
    from torch.distributed.tensor import DTensor
    return t.full_tensor() if isinstance(t, DTensor) else t


def rel(a, b):
    a, b = full(a).detach().double(), full(b).detach().double()
    if a.shape != b.shape:
        return f"SHAPE {tuple(a.shape)} vs {tuple(b.shape)}"
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def sites():
    return mojo_compile.last_report().counts()


def notes():
    r = mojo_compile.last_report()
    return [n for g in r.graphs for n in g.notes] + [m.reason for g in r.graphs for m in g.near_misses]


def verdict(name, c, e, d):
    """c compiled, e eager, d fp64: flag when err(c) > 2 err(e) + 1e-6."""
    ec, ee = rel(c, d), rel(e, d)
    if isinstance(ec, str) or isinstance(ee, str):
        return f"{name}: {ec} / {ee}"
    flag = "  <-- WRONG" if ec > 2 * ee + 1e-6 else ""
    return f"{name}: comp {ec:.2e} eager {ee:.2e}{flag}"
