"""The Mojo ops under torch.distributed on the CPU (gloo), torch target: every op and its backward on DTensors
sharded as tensor / sequence parallelism shards them (sharding.py; each op module declares its layouts), against
the same op on the whole tensors in one process; and a tiny HF Llama compiled with the mojo backend under FSDP2
(`fully_shard`), under tensor + sequence parallelism (`parallelize_module`) and under both on a 2 x 2 mesh, against
the single-process eager model. Each test spawns its ranks (torch.multiprocessing); a rank's failure fails the test."""
import functools
import os
import socket
import sys
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import mojo_compile  # noqa: F401  (in each spawned rank: the ops, their sharding, and backend="mojo" uninstalled)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import bench_distributed  # noqa: E402  (its tensor-parallel plans: the ones the benchmark times)

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo")


def _free_port() -> int:
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


def spawn(body, world: int):
    errors = mp.get_context("spawn").SimpleQueue()
    try:
        mp.spawn(_entry, args=(world, _free_port(), body, errors), nprocs=world)
    except Exception as e:
        messages = []
        while not errors.empty():
            messages.append(errors.get())
        pytest.fail("\n".join(messages) or str(e))


# ------------------------------------------------------------------------------------------- each op on DTensors
def _cases():
    """name -> (fn of the inputs returning a tuple of float outputs, inputs, placements per input (None: a plain
    value), whether the outputs must equal the whole-tensor op's bit for bit). Built alike on every rank (seeded)."""
    from torch.distributed.tensor import Replicate, Shard

    ops = torch.ops.mojo
    torch.manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, requires_grad=True)

    seq, heads, rows = Shard(1), Shard(1), Shard(0)
    return {
        "rms_norm (sequence)": (lambda x, w: ops.rms_norm(x, w, 1e-6, 0.0, "output", "torch")[:1],
                                [r(2, 8, 16), r(16)], [seq, Replicate()], False),
        "add_rms_norm (sequence)": (lambda x, res, w: ops.add_rms_norm(x, res, w, 1e-6, 0.0, "normed", "torch")[:2],
                                    [r(2, 8, 16), r(2, 8, 16), r(16)], [seq, seq, Replicate()], False),
        "layer_norm (sequence)": (lambda x, w, b: ops.layer_norm(x, w, b, 1e-5, "torch")[:1],
                                  [r(2, 8, 16), r(16), r(16)], [seq, Replicate(), Replicate()], False),
        "add_layer_norm (rows)": (lambda x, res, w, b: ops.add_layer_norm(x, res, w, b, 1e-5, "torch")[:2],
                                  [r(8, 16), r(8, 16), r(16), r(16)], [rows, rows, Replicate(), Replicate()], False),
        "gated_act (columns)": (lambda g, u: (ops.gated_act(g, u, "silu", "torch"),), [r(4, 6, 32), r(4, 6, 32)],
                                [Shard(2), Shard(2)], True),
        "gated_act_fused (rows)": (lambda gu: (ops.gated_act_fused(gu, "gelu_tanh", True, "torch"),), [r(8, 32)],
                                   [rows], True),
        "rope (heads)": (lambda q, k, cos, sin: ops.rope(q, k, cos, sin, 8, False, 2, False, "torch"),
                         [r(2, 4, 6, 8), r(2, 2, 6, 8), torch.randn(1, 6, 8), torch.randn(1, 6, 8)],
                         [heads, heads, Replicate(), Replicate()], True),
        "qk_norm_rope (heads)": (
            lambda q, k, wq, wk, cos, sin: ops.qk_norm_rope(q, k, wq, wk, 1e-6, 0.0, "normed", cos, sin, 8, False, 2,
                                                            False, "torch")[:2],
            [r(2, 4, 6, 8), r(2, 2, 6, 8), r(8), r(8), torch.randn(1, 6, 8), torch.randn(1, 6, 8)],
            [heads, heads, Replicate(), Replicate(), Replicate(), Replicate()], False),
        "attention GQA (heads)": (
            lambda q, k, v: ops.attention(q, k, v, None, None, 0.35, True, 0, 0.0, None, "torch")[:1],
            [r(2, 4, 6, 8), r(2, 2, 6, 8), r(2, 2, 6, 8)], [heads, heads, heads], True),
        "attention mask per head (heads)": (
            lambda q, k, v, mask: ops.attention(q, k, v, mask, None, 0.35, False, 0, 0.0, None, "torch")[:1],
            [r(2, 4, 6, 8), r(2, 4, 6, 8), r(2, 4, 6, 8), torch.rand(2, 4, 6, 6) > 0.3],
            [heads, heads, heads, heads], True),
        # masks of fewer dims broadcast from the right: replicated where they have no heads dim, sharded on their
        # own dim 0 where it is the heads (3-D)
        "attention 2-D additive mask (heads)": (
            lambda q, k, v, mask: ops.attention(q, k, v, mask, None, 0.35, False, 0, 0.0, None, "torch")[:1],
            [r(2, 4, 6, 8), r(2, 4, 6, 8), r(2, 4, 6, 8), torch.randn(6, 6)], [heads, heads, heads, Replicate()],
            True),
        "attention 2-D mask, fewer keys than ranks' heads (heads)": (
            lambda q, k, v, mask: ops.attention(q, k, v, mask, None, 0.35, False, 0, 0.0, None, "torch")[:1],
            [r(2, 4, 4, 8), r(2, 4, 2, 8), r(2, 4, 2, 8), torch.randn(4, 2)], [heads, heads, heads, Replicate()],
            True),
        "attention 1-D key mask (heads)": (
            lambda q, k, v, mask: ops.attention(q, k, v, mask, None, 0.35, False, 0, 0.0, None, "torch")[:1],
            [r(2, 4, 6, 8), r(2, 4, 6, 8), r(2, 4, 6, 8), torch.rand(6) > 0.3], [heads, heads, heads, Replicate()],
            True),
        "attention 3-D mask per head (heads)": (
            lambda q, k, v, mask: ops.attention(q, k, v, mask, None, 0.35, False, 0, 0.0, None, "torch")[:1],
            [r(2, 4, 6, 8), r(2, 4, 6, 8), r(2, 4, 6, 8), torch.randn(4, 6, 6)], [heads, heads, heads, Shard(0)],
            True),
        "cross_entropy sum (rows)": (
            lambda logits, labels: ops.cross_entropy(logits, labels, -100, "sum", 0.0, "torch")[:1],
            [r(8, 32), torch.tensor([1, -100, 3, 4, 30, -100, 6, 7])], [rows, rows], False),
        "cross_entropy none (rows)": (
            lambda logits, labels: ops.cross_entropy(logits, labels, -100, "none", 0.1, "torch")[:1],
            [r(8, 32), torch.randint(0, 32, (8,))], [rows, rows], True),
    }


def _ops_body(rank, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    for name, (fn, inputs, placements, bitwise) in _cases().items():
        outs = fn(*inputs)
        grads_out = [torch.randn(o.shape, generator=torch.Generator().manual_seed(7)) for o in outs]
        leaves = [t for t in inputs if t.requires_grad]
        ref_grads = torch.autograd.grad(outs, leaves, grads_out)
        shards = [distribute_tensor(t.detach(), mesh, [p]).requires_grad_(t.requires_grad) for t, p in
                  zip(inputs, placements)]
        got = fn(*shards)
        for o, ref in zip(got, outs):
            assert isinstance(o, DTensor), (name, type(o))
            if bitwise:
                assert torch.equal(o.full_tensor(), ref), name
            else:  # a partial sum over ranks adds in another order
                torch.testing.assert_close(o.full_tensor(), ref, rtol=1e-6, atol=1e-6, msg=name)
        cotangents = [distribute_tensor(g, mesh, [Replicate() if isinstance(p, Partial) else p for p in o.placements])
                      for g, o in zip(grads_out, got)]
        shard_leaves = [s for s, t in zip(shards, inputs) if t.requires_grad]
        grads = torch.autograd.grad(got, shard_leaves, cotangents)
        for g, ref, leaf in zip(grads, ref_grads, leaves):
            # the weights' gradients are sums over every rank's rows: fp32 sums in another order
            torch.testing.assert_close(g.full_tensor(), ref, rtol=1e-5, atol=1e-5, msg=f"{name}: gradient")


@pytest.mark.parametrize("world", [2, 4])
def test_every_op_on_dtensors(world):
    """Sharded as the parallelisms shard them, each op and its backward run on the local shards (a layout the op
    does not declare would be an error, or a redistribution) and equal the op on the whole tensors."""
    spawn(_ops_body, world)


# ------------------------------------------------------------------------------------------ a model, parallelised
def _llama(seed=0):
    import transformers

    torch.manual_seed(seed)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")


OPTIONS = {"target": "torch", "inner_compiler": "eager"}
IDS = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(3))


def _reference():
    """The single-process eager model's loss and gradients (fp32)."""
    model = _llama()
    out = model(input_ids=IDS, labels=IDS)
    out.loss.backward()
    return out.loss.detach(), {n: p.grad for n, p in model.named_parameters()}


def _check_against_eager(model, loss, tag, fused=True):
    from torch.distributed.tensor import DTensor

    ref_loss, ref_grads = _reference()
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-5, msg=f"{tag}: loss")
    for name, p in model.named_parameters():
        grad = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
        # fp32 against the same fp32 model: sums split over ranks add in another order
        torch.testing.assert_close(grad, ref_grads[name.removeprefix("_orig_mod.")], rtol=1e-4, atol=1e-5,
                                   msg=f"{tag}: {name}")
    report = mojo_compile.last_report()
    counts = report.counts()
    if fused:
        assert counts.get("mojo.add_rms_norm", 0) + counts.get("mojo.rms_norm", 0) >= 1 and counts["mojo.rope"] >= 1, \
            (tag, counts)
    return report


def _fsdp_body(rank, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    # The mesh named: by default FSDP2 shards onto the accelerator where there is one, away from the CPU reference.
    mesh = init_device_mesh("cpu", (world,))
    model = _llama()
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    out = torch.compile(model, backend="mojo", options=OPTIONS)(input_ids=IDS, labels=IDS)
    out.loss.backward()
    _check_against_eager(model, out.loss.detach(), "FSDP2")


def test_llama_under_fsdp2():
    """fully_shard per layer: each rank holds a shard of the parameters, gathered for the forward (the ops see
    whole tensors); loss and gathered gradients equal the single-process eager model's."""
    spawn(_fsdp_body, 2)


def _tp_sp_plan():
    """torchtitan's Llama plan, for HF's module names (benchmarks/bench_distributed.py's, which times it):
    attention and MLP projections split column / row-wise (heads and the MLP's hidden dim sharded), norms and residual
    stream sharded on the sequence (SequenceParallel), the embedding split row-wise."""
    return bench_distributed.tp_sp_plan("llama")


def _tp_sp_body(rank, world, options=OPTIONS):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    mesh = init_device_mesh("cpu", (world,))
    model = _llama()
    layer_plan, top_plan = _tp_sp_plan()
    for layer in model.model.layers:
        parallelize_module(layer, mesh, layer_plan)
    parallelize_module(model, mesh, top_plan)
    out = torch.compile(model, backend="mojo", options=options)(input_ids=IDS, labels=IDS)
    out.loss.backward()
    report = _check_against_eager(model, out.loss.detach(), "TP + SP")
    # every site of the 2 layers: the norms on DTensors (sequence shards), RoPE, attention and the gated activation
    # on each rank's heads and columns (plain shards after to_local), the loss on the gathered logits
    assert report.counts() == {"mojo.rms_norm": 1, "mojo.add_rms_norm": 4, "mojo.rope": 2, "mojo.attention": 2,
                               "mojo.gated_act": 2, "mojo.cross_entropy": 1}, report.counts()
    assert not any(note.startswith("not rewritten") for g in report.graphs for note in g.notes), report.table()


def test_llama_under_tensor_and_sequence_parallel():
    """Heads and MLP columns split over 2 ranks, norms on sequence shards (torchtitan's plan): the graph of DTensors
    is traced in the global view, every site fuses, and the loss and gathered gradients equal the eager model's."""
    spawn(_tp_sp_body, 2)


def test_llama_under_tensor_and_sequence_parallel_default_options():
    """The same with what users run: default options, so Inductor compiles the rewritten graph of DTensors."""
    spawn(functools.partial(_tp_sp_body, options=None), 2)


def _loss_parallel_body(rank, world, options=OPTIONS):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, loss_parallel, parallelize_module

    mesh = init_device_mesh("cpu", (world,))
    model = _llama()
    layer_plan, top_plan = _tp_sp_plan()
    # torchtitan's loss-parallel head: the logits stay vocabulary shards (a DTensor), the labels plain
    top_plan["lm_head"] = ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False)
    for layer in model.model.layers:
        parallelize_module(layer, mesh, layer_plan)
    parallelize_module(model, mesh, top_plan)
    # The step returns the loss alone, as a training step does: with the vocabulary-sharded logits among its
    # outputs and only the loss differentiated, AOTAutograd (torch's own backend="inductor" too) expects a DTensor
    # tangent for the logits and fails.
    step = torch.compile(lambda ids: model(input_ids=ids, labels=ids).loss, backend="mojo", options=options)
    with loss_parallel():
        loss = step(IDS)
        loss.backward()
    report = _check_against_eager(model, loss.full_tensor().detach(), "loss_parallel")
    counts = report.counts()
    # the layers fuse as without loss_parallel; the loss on vocabulary shards is DTensor's (its loss_parallel
    # computes it on the shards), with the reason in the report
    assert "mojo.cross_entropy" not in counts and counts["mojo.attention"] == 2, counts
    assert any("DTensor" in miss.reason for g in report.graphs for miss in g.near_misses), report.table()


def test_loss_parallel_leaves_the_loss_on_vocabulary_shards_to_dtensor():
    """Under `loss_parallel()` the logits are vocabulary shards (a DTensor) and the labels a plain tensor: the fused
    loss would meet a DTensor beside a plain tensor, which DTensor refuses ("mixed torch.Tensor and DTensor").
    The loss is left to DTensor; loss and gradients equal the single-process eager model's."""
    spawn(_loss_parallel_body, 2)


def test_loss_parallel_default_options():
    """The same with default options (the Inductor inner compiler)."""
    spawn(functools.partial(_loss_parallel_body, options=None), 2)


def _head_and_loss_on_dtensors_body(rank, world):
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    gen = torch.Generator().manual_seed(5)
    hidden, weight = torch.randn(8, 16, generator=gen), torch.randn(32, 16, generator=gen)
    labels = torch.randint(0, 32, (8,), generator=gen)

    def head_and_loss(h, w, t):
        return F.cross_entropy(F.linear(h, w).float(), t)

    inputs = [distribute_tensor(t, mesh, [Replicate()]) for t in (hidden, weight, labels)]
    for t in inputs[:2]:
        t.requires_grad_(True)
    loss = torch.compile(head_and_loss, backend="mojo", options=OPTIONS)(*inputs)
    loss.backward()
    ref = [t.clone().requires_grad_(t.is_floating_point()) for t in (hidden, weight, labels)]
    ref_loss = head_and_loss(*ref)
    ref_loss.backward()
    torch.testing.assert_close(loss.full_tensor(), ref_loss, rtol=1e-6, atol=1e-6)
    for got, want in zip(inputs[:2], ref[:2]):
        torch.testing.assert_close(got.grad.full_tensor(), want.grad, rtol=1e-6, atol=1e-6)
    # the head is DTensor's; the loss on its replicated logits is the materialised-logits op, which declares the
    # layouts it takes (row shards or replicas: local)
    assert mojo_compile.last_report().counts() == {"mojo.cross_entropy": 1}, mojo_compile.last_report().table()


def test_the_fused_head_and_loss_is_left_to_dtensor():
    """`mojo.linear_cross_entropy` declares no sharding: on DTensors (an LM head under tensor parallelism) it would
    raise where eager runs. The head is left to DTensor; loss and gradients equal eager's."""
    spawn(_head_and_loss_on_dtensors_body, 2)


def _decode_linears_on_dtensors_body(rank, world):
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    gen = torch.Generator().manual_seed(11)
    x, w_col, w_row = torch.randn(1, 16, generator=gen), torch.randn(32, 16, generator=gen), \
        torch.randn(16, 32, generator=gen)

    def mlp(x, w_col, w_row):  # a decode step's column- then row-parallel projections (one row, no gradient)
        return F.linear(F.silu(F.linear(x, w_col)), w_row)

    args = (distribute_tensor(x, mesh, [Replicate()]), distribute_tensor(w_col, mesh, [Shard(0)]),
            distribute_tensor(w_row, mesh, [Shard(1)]))
    with torch.no_grad():
        got = torch.compile(mlp, backend="mojo", options=OPTIONS)(*args)
    torch.testing.assert_close(got.full_tensor(), mlp(x, w_col, w_row), rtol=1e-6, atol=1e-6)
    counts = mojo_compile.last_report().counts()
    assert not any(op.startswith("mojo.linear") for op in counts), counts


def test_decode_linears_are_left_to_dtensor():
    """The decode linears declare no sharding: a tensor-parallel decode step's projections (weights sharded by
    column and row) are left to DTensor, where `mojo.linear` would raise; the result equals eager's."""
    spawn(_decode_linears_on_dtensors_body, 2)


def _tp_sp_plan_2d():
    """The TP + SP plan for the 2-D mesh, with the embedding split column-wise (its hidden dim) instead of row-wise
    (the vocabulary). Row-wise, torch 2.13's DTensor embedding masks out-of-shard ids (`_MaskPartial`), which under
    torch.compile with FSDP2 fails in Dynamo's fake tensors even with backend="eager"."""
    return bench_distributed.tp_sp_plan("llama", embedding="colwise")


def _two_d_body(rank, world, options=OPTIONS):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import parallelize_module

    mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("dp", "tp"))
    model = _llama()
    layer_plan, top_plan = _tp_sp_plan_2d()
    for layer in model.model.layers:
        parallelize_module(layer, mesh["tp"], layer_plan)
    parallelize_module(model, mesh["tp"], top_plan)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    out = torch.compile(model, backend="mojo", options=options)(input_ids=IDS, labels=IDS)
    out.loss.backward()
    report = _check_against_eager(model, out.loss.detach(), "FSDP2 + TP + SP")
    # FSDP2's hooks break the graph per layer; each layer's graph fuses all its sites, and the top's the final norm
    # and the loss. The input hooks' graphs (a plain tensor made a DTensor) fuse nothing and are not refused.
    counts = report.counts()
    assert counts == {"mojo.rms_norm": 3, "mojo.add_rms_norm": 2, "mojo.rope": 2, "mojo.attention": 2,
                      "mojo.gated_act": 2, "mojo.cross_entropy": 1}, counts
    assert not any(note.startswith("not rewritten") for g in report.graphs for note in g.notes), report.table()


def test_llama_under_fsdp2_with_tensor_and_sequence_parallel():
    """2-D: a 2 x 2 mesh of 4 ranks, FSDP2 over one dim and TP + SP over the other, as torchtitan composes them.
    Loss and gathered gradients equal the single-process eager model's, and every layer's sites fuse."""
    spawn(_two_d_body, 4)


def test_llama_under_fsdp2_with_tensor_and_sequence_parallel_default_options():
    """The same with what users run: default options, so Inductor compiles each rewritten graph."""
    spawn(functools.partial(_two_d_body, options=None), 4)


def _made_in_graph_body(rank, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard

    mesh = init_device_mesh("cpu", (world,))

    def make(x, y):  # what parallelize_module's input hooks compile to: plain tensors in, DTensors out
        return DTensor.from_local(x * 2, mesh, [Shard(0)], run_check=False), \
            DTensor.from_local(y, mesh, [Replicate()], run_check=False)

    compiled = torch.compile(make, backend="mojo", options=OPTIONS)
    for seed in range(3):  # fresh values every call: an output baked in at compile time would repeat the first
        gen = torch.Generator().manual_seed(seed * world + rank)
        x, y = torch.randn(4, 8, generator=gen), torch.randn(3, generator=gen)
        got, ref = compiled(x, y), make(x, y)
        for g, r in zip(got, ref):
            assert isinstance(g, DTensor) and g.placements == r.placements, (type(g), g)
            assert torch.equal(g.to_local(), r.to_local()) and torch.equal(g.full_tensor(), r.full_tensor())


def test_a_graph_that_makes_dtensors_from_plain_inputs():
    """A graph with no DTensor input that returns `DTensor.from_local(...)`: traced in the global view too. The
    plain trace made the DTensor a constant of fake tensors, which every later call returned."""
    spawn(_made_in_graph_body, 2)


def test_a_trace_that_bakes_in_a_traced_value_is_refused():
    """A constant made of a fake tensor would be every call's answer: the trace is refused (the backend then compiles
    the graph as Dynamo gave it). A real constant (a `torch.tensor(...)` in the model) is kept."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from mojo_compile import backend

    def graph_with(constant):
        gm = torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph())
        gm._tensor_constant0 = constant
        gm.graph.output(gm.graph.get_attr("_tensor_constant0"))
        gm.recompile()
        return gm

    with FakeTensorMode():
        fake = torch.randn(3)
    with pytest.raises(backend.TracedConstantError, match="FakeTensor"):
        backend._refuse_traced_constants(graph_with(fake))
    backend._refuse_traced_constants(graph_with(torch.randn(3)))


def test_a_dtensor_call_the_global_view_cannot_show_is_named():
    """A graph of DTensors with another DTensor call (a collective, a DTensor made otherwise, a DTensor-only
    method) is not traced in the global view: `unsupported` names the call, and the backend leaves the graph."""
    from torch.distributed.tensor import distribute_tensor
    from mojo_compile import dtensor

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(distribute_tensor, (x,)))
    assert "a torch.distributed call" in dtensor.unsupported(torch.fx.GraphModule(torch.nn.Module(), graph))
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_method("device_mesh_of", (x,)))
    assert "a method of DTensor only" in dtensor.unsupported(torch.fx.GraphModule(torch.nn.Module(), graph))

    def closure(x):
        return x
    closure.__name__ = "prim_placements"  # how Dynamo names a DTensor call it closes over its constants
    graph = torch.fx.Graph()
    graph.output(graph.call_function(closure, (graph.placeholder("x"),)))
    assert "a call Dynamo made of a DTensor method" in dtensor.unsupported(
        torch.fx.GraphModule(torch.nn.Module(), graph))


def test_dynamos_closures_over_dtensor_calls_are_boundaries():
    """torch 2.11's Dynamo puts from_local / to_local / redistribute in the graph as closures named after them."""
    from mojo_compile import dtensor

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    for name in ("prim from_local", "prim_to_local", "prim_redistribute"):
        def closure(x):
            return x
        closure.__name__ = name
        assert dtensor.is_boundary(graph.call_function(closure, (x,))), name
    assert not dtensor.is_boundary(graph.call_function(torch.relu, (x,)))
