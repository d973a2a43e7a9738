"""Review s26 dist: findings as failing tests (2 gloo ranks on the CPU, op level: fast)."""
import os
import socket
import traceback

import conftest  # noqa: F401  (TRITON_INTERPRET before mojo_compile)
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import mojo_compile  # noqa: F401

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank, world, port, body, errors):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        body(rank, world)
    except BaseException:
        errors.put(f"rank {rank}: {traceback.format_exc()}")
        raise
    finally:
        dist.destroy_process_group()


def spawn(body, world=2):
    errors = mp.get_context("spawn").SimpleQueue()
    try:
        mp.spawn(_entry, args=(world, _free_port(), body, errors), nprocs=world)
    except Exception as e:
        messages = []
        while not errors.empty():
            messages.append(errors.get())
        pytest.fail("\n".join(messages) or str(e))


def _mask_fewer_dims_body(rank, world, q_len, kv_len):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, q_len, 8, generator=gen)
    k, v = torch.randn(2, 4, kv_len, 8, generator=gen), torch.randn(2, 4, kv_len, 8, generator=gen)
    mask = torch.randn(q_len, kv_len, generator=gen)  # 2-D additive mask [Sq, Skv]: broadcast over B and heads
    ref = torch.ops.mojo.attention(q, k, v, mask, None, 0.35, False, 0, 0.0, None, "torch")[0]
    args = [distribute_tensor(t, mesh, [Shard(1)]) for t in (q, k, v)] + [distribute_tensor(mask, mesh, [Replicate()])]
    got = torch.ops.mojo.attention(*args, None, 0.35, False, 0, 0.0, None, "torch")[0]
    torch.testing.assert_close(got.full_tensor(), ref, rtol=1e-6, atol=1e-6)


def _crash(rank, world):
    _mask_fewer_dims_body(rank, world, 6, 6)


def _wrong(rank, world):
    _mask_fewer_dims_body(rank, world, 4, 2)


def test_attention_on_head_shards_with_a_2d_mask_runs():
    """q/k/v sharded on heads, a replicated 2-D mask [Sq, Skv]: the declared layout shards the mask on its dim 1
    (the KEY dim, not heads): each rank gets [Sq, Skv/2] and the op raises 'mask does not broadcast'."""
    spawn(_crash)


def test_attention_on_head_shards_with_a_2d_mask_equals_the_whole_op():
    """With Skv = 2 the mis-sharded mask [Sq, 1] broadcasts: each rank silently applies one key column's bias to
    every key (wrong numbers, max diff ~1.6)."""
    spawn(_wrong)
