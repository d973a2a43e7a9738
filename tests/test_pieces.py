"""The backward in pieces (mojo_compile/pieces.py): a training graph with large gradients compiled as a chain of
graphs, so each piece's parameter gradients reach `.grad` before the next piece's backward runs. Loss and every
gradient as accurate as eager's against fp64 (two steps: the second accumulates), with static and dynamic shapes;
the gradients handed over piece by piece; where the plan cuts and where it must not (autocast and no-grad regions,
no grad at all, small gradients); the option's checks."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import mojo_compile
from mojo_compile import pieces
from mojo_compile.options import OptionError, Options
from test_cross_entropy import check_as_accurate

VOCAB, HID, INTER = 50, 64, 96


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.RMSNorm(HID, eps=1e-6)
        self.gate = nn.Linear(HID, INTER, bias=False)
        self.up = nn.Linear(HID, INTER, bias=False)
        self.down = nn.Linear(INTER, HID, bias=False)

    def forward(self, x):
        y = self.norm(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class TinyLM(nn.Module):
    """Embedding, three SwiGLU blocks, an untied LM head and the loss: the shape of a causal LM's train step."""

    def __init__(self, layers=3):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HID)
        self.blocks = nn.ModuleList(Block() for _ in range(layers))
        self.head = nn.Linear(HID, VOCAB, bias=False)

    def forward(self, ids, labels):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return F.cross_entropy(self.head(x).float().view(-1, VOCAB), labels.view(-1))


def copies():
    torch.manual_seed(0)
    model = TinyLM()
    eager, exact = TinyLM(), TinyLM().double()
    eager.load_state_dict(model.state_dict())
    exact.load_state_dict(model.state_dict())
    return model, eager, exact


# Pieces of 64 KiB: each block's weights (3 x 24 KiB) fill one, the embedding (12.5 KiB) joins the first block,
# the head (12.5 KiB) gets the last: [embedding + block 0] [block 1] [block 2] [head + loss].
SMALL_PIECES = {"backward_piece_mb": 64 / 1024}


def train_steps(fn, model, batches):
    losses = []
    for ids, labels in batches:
        loss = fn(ids, labels)
        loss.backward()
        losses.append(loss.detach())
    return losses, {n: p.grad for n, p in model.named_parameters()}


def batches(*lengths):
    torch.manual_seed(1)
    return [(torch.randint(0, VOCAB, (2, n)), torch.randint(0, VOCAB, (2, n))) for n in lengths]


def check_against_fp64(model, eager, exact, data, **compile_kwargs):
    compiled = torch.compile(model, backend="mojo", options=SMALL_PIECES, **compile_kwargs)
    got = train_steps(compiled, model, data)
    assert mojo_compile.last_report().graphs[-1].pieces == 4  # (dynamic=True: Inductor compiles the frame twice)
    ref = train_steps(eager, eager, data)
    want = train_steps(exact, exact, data)
    for mine, theirs, truth in zip(got[0], ref[0], want[0]):
        check_as_accurate(mine, theirs, truth, torch.float32, "loss")
    for name in got[1]:  # after every step: the gradients accumulated over the steps
        check_as_accurate(got[1][name], ref[1][name], want[1][name], torch.float32, name)


def test_pieces_as_accurate_as_eager():
    check_against_fp64(*copies(), batches(7, 7))


def test_pieces_with_dynamic_shapes():
    """dynamic=True: sizes are symbols in every piece; two lengths through one compile."""
    check_against_fp64(*copies(), batches(7, 9), dynamic=True)


def test_gradients_reach_grad_piece_by_piece():
    """The LM head's gradient is accumulated into .grad while the embedding's backward has not run yet: the head's
    piece handed its gradients over before the first piece's backward. A graph compiled whole hands over all of
    them together, after its one backward."""
    def run(options):
        model = copies()[0]
        seen = []
        model.head.weight.register_post_accumulate_grad_hook(lambda p: seen.append(model.embed.weight.grad is None))
        compiled = torch.compile(model, backend="mojo", options=options)
        compiled(*batches(7)[0]).backward()
        return seen, mojo_compile.last_report().graphs[-1].pieces

    assert run(SMALL_PIECES) == ([True], 4)
    assert run({"backward_piece_mb": 0}) == ([False], 1)


# ------------------------------------------------------------------------------------------------------ the plan
def traced(fn, *args):
    return make_fx(fn, pre_dispatch=True)(*args)


def layers(n, width=64):
    torch.manual_seed(0)
    return [torch.randn(width, width, requires_grad=True) for _ in range(n)]


def test_plan_cuts_before_each_full_piece_and_isolates_a_large_parameter():
    """Pieces of 2 x 16 KiB: cuts where the next piece's first weight is used; the 4x larger last weight (an LM
    head) gets a piece of its own."""
    ws = layers(4) + [torch.randn(128, 128, requires_grad=True)]
    x = torch.randn(3, 64)

    def fn(x, a, b, c, d, head):
        for w in (a, b, c, d):
            x = torch.relu(x @ w)
        return (x.repeat(1, 2) @ head).sum()

    gm = traced(fn, x, *ws)
    plan = pieces.plan(gm, [x, *ws], 32 / 1024)
    users = {p.name: next(iter(p.users)) for p in gm.graph.find_nodes(op="placeholder") if p.users}
    piece_of = {name: plan[node] for name, node in users.items() if name != "x_1"}
    assert list(piece_of.values()) == [0, 0, 1, 1, 2], piece_of


def test_plan_cuts_where_the_least_crosses_over():
    """Gated MLP layers whose weights (3 x 24 KiB) fill pieces of 40 KiB mid-layer, then a head. Cut at the first
    weight use past a full piece, the cuts would fall before down projections, handing their [tokens,
    intermediate] inputs to the next piece (which saves them again for its backward). The plan looks one piece
    ahead and cuts where the least crosses: before the next layer's gate (the residual stream and the normalised
    input) and before the head, never inside an MLP."""
    torch.manual_seed(0)
    ws = [torch.randn(*shape, requires_grad=True) for _ in range(3) for shape in ((64, 96), (64, 96), (96, 64))]
    ws.append(torch.randn(64, 64, requires_grad=True))
    x = torch.randn(32, 64)

    def fn(x, *ws):
        x = x * 2  # made in the graph, as an embedding's output is
        for gate, up, down in zip(ws[0:9:3], ws[1:9:3], ws[2:9:3]):
            y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
            x = x + (F.silu(y @ gate) * (y @ up)) @ down
        return (x @ ws[9]).sum()

    gm = traced(fn, x, *ws)
    plan = pieces.plan(gm, [x, *ws], 40 / 1024)
    assert plan is not None
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    first_use = [min(p.users, key=order.__getitem__) for p in gm.graph.find_nodes(op="placeholder")][1:]
    piece_of = [plan[node] for node in first_use]  # gate, up, down of each layer, then the head
    assert piece_of == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3], piece_of
    crossing = pieces._crossing_bytes(gm, order)
    downs, gates = first_use[2:9:3], first_use[3:10:3]
    assert all(crossing[order[d]] > crossing[order[g]] for d, g in zip(downs, gates))


def test_plan_never_cuts_inside_an_autocast_or_no_grad_region():
    """A cut is due at every weight's first use; none falls between an autocast's enter and exit or a no_grad
    region's grad-mode changes (a piece compiled alone would run half a region)."""
    ws = layers(6)
    x = torch.randn(3, 64)

    def fn(x, *ws):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            for w in ws[:3]:
                x = x @ w
        x = x.float()
        with torch.no_grad():
            y = x @ ws[3] @ ws[4]
        return (x @ ws[5] + y).sum()

    gm = traced(fn, x, *ws)
    plan = pieces.plan(gm, [x, *ws], 16 / 1024)
    assert plan is not None and len(set(plan.values())) >= 2
    nodes = [n for n in gm.graph.nodes if n in plan]
    changes = [i for i, n in enumerate(nodes) if pieces._region_change(n) != (0, None)]
    assert len(changes) == 4, "the trace records autocast's enter / exit and no_grad's two grad-mode changes"
    for begin, end in (changes[0:2], changes[2:4]):
        assert len({plan[n] for n in nodes[begin:end + 1]}) == 1, "a region stays in one piece"


def test_plan_keeps_small_or_gradless_graphs_whole():
    ws = layers(4)
    x = torch.randn(3, 64)

    def fn(x, *ws):
        for w in ws:
            x = x @ w
        return x.sum()

    gm = traced(fn, x, *ws)
    assert pieces.plan(gm, [x, *ws], 64 / 1024) is None  # 64 KiB of gradients: less than two pieces of 64
    assert pieces.plan(gm, [x, *ws], 0) is None  # 0: never
    with torch.no_grad():
        assert pieces.plan(gm, [x, *ws], 1 / 1024) is None
    frozen = [w.detach() for w in ws]
    assert pieces.plan(gm, [x, *frozen], 1 / 1024) is None


@pytest.mark.parametrize("value", [-1, "big", True, float("nan"), float("inf")])
def test_backward_piece_mb_must_be_a_size(value):
    with pytest.raises(OptionError, match="backward_piece_mb"):
        Options.parse(options={"backward_piece_mb": value})


def test_backward_piece_mb_from_the_environment(monkeypatch):
    monkeypatch.setenv("MOJO_BACKWARD_PIECE_MB", "64")
    assert Options.parse().backward_piece_mb == 64
    assert Options.parse(options={"backward_piece_mb": 0}).backward_piece_mb == 0
    assert Options.parse(options={"backward_piece_mb": 0, "inner_compiler": "eager"}).backward_piece_mb == 0


def test_hf_llama_train_step_in_pieces():
    """HF Llama (tiny, fp32) through its own loss (`labels=`, some rows ignored), the function returning the loss
    compiled with the Inductor inner compiler in pieces of 16 KiB (each decoder layer a piece, the LM head one of
    its own): the loss and every parameter's gradient as accurate as eager's against an fp64 copy."""
    import copy

    from test_hf_models import build, check_step_against_fp64

    model = build("llama", torch.float32).train()
    golden = copy.deepcopy(model).double()
    ids = torch.randint(3, 256, (2, 12), device=model.device)
    labels = ids.clone()
    labels[1, :5] = -100

    def loss_of(m):
        return lambda input_ids, labels: m(input_ids=input_ids, labels=labels).loss

    loss = torch.compile(loss_of(model), backend="mojo", options={"backward_piece_mb": 16 / 1024})(ids, labels)
    loss.backward()
    assert mojo_compile.last_report().graphs[-1].pieces >= 3
    got = {n: p.grad.clone() for n, p in model.named_parameters()}
    check_step_against_fp64(loss, got, loss_of, model, golden, ids, labels, grad_floor=1e-6)  # fp32


def test_a_graph_the_pieces_fail_on_compiles_whole(monkeypatch, caplog):
    """Pieces only save memory: where splitting or a piece's compile fails, the graph compiles whole (one piece),
    with the reason logged, and the step is still right."""
    def broken(*args, **kwargs):
        raise RuntimeError("no pieces today")

    monkeypatch.setattr(pieces, "compile_in_pieces", broken)
    model, eager, exact = copies()
    compiled = torch.compile(model, backend="mojo", options=SMALL_PIECES)
    with caplog.at_level("WARNING", logger="mojo_compile"):
        loss = compiled(*batches(7)[0])
    loss.backward()
    assert mojo_compile.last_report().graphs[-1].pieces == 1
    assert "no pieces today" in caplog.text
    check_as_accurate(loss.detach(), eager(*batches(7)[0]), exact(*batches(7)[0]), torch.float32, "loss")


# ------------------------------------------------------------------ spellings an adversarial review found breaking
class LayerScaleInPlace(nn.Module):
    """timm's LayerScale(inplace=True): `x.mul_(gamma)` on the branch's output, gamma's first use. A cut there would
    hand the earlier piece's output to a piece that writes it (an error in the backward)."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.ModuleDict(dict(fc1=nn.Linear(32, 64), fc2=nn.Linear(64, 32)))
                                    for _ in range(3))
        self.gammas = nn.ParameterList(nn.Parameter(torch.rand(32) + 0.5) for _ in range(3))

    def forward(self, x):
        for block, gamma in zip(self.blocks, self.gammas):
            x = x + block["fc2"](F.gelu(block["fc1"](x))).mul_(gamma)
        return x.square().mean()


class ShapeChangedInPlace(nn.Module):
    """`b.unsqueeze_(0)` on a value an earlier piece made: the piece must be compiled for b's shape before it."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(16, 16), nn.Linear(16, 16)
        self.w3 = nn.Parameter(torch.randn(8, 16) / 4)

    def forward(self, x):
        a = torch.tanh(self.l1(x[0]))
        b = a * 2
        c = self.l2(a)
        b.unsqueeze_(0)
        return c.sum() + (b.reshape(16, 8) @ self.w3).square().sum()


class ViewWrittenLater(nn.Module):
    """A view of a value written in place after a parameter's first use: the view and its base stay in one piece."""

    def __init__(self):
        super().__init__()
        self.w1, self.w2, self.w3 = (nn.Parameter(torch.randn(16, 16) / 4) for _ in range(3))

    def forward(self, x):
        a = torch.tanh(x[0] @ self.w1).detach() * 1.0
        v = a[:, :8]
        y = torch.tanh(x[0] @ self.w2)
        v.add_(1)
        return ((y + a) @ self.w3).square().mean() + v.sum()


class ConstantMadeInForward(nn.Module):
    """A tensor the forward builds from literals: a constant of the graph, an input of the piece that uses it."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x):
        c = torch.tensor([0.5, 2.0, 3.0], dtype=x.dtype).repeat(6)[:16]
        return self.l3(torch.tanh(self.l2(torch.tanh(self.l1(x[0]) * c)))).square().mean()


class WrittenThroughAnUnannotatedAlias(nn.Module):
    """`torch.broadcast_tensors(h, s)[0]` is h itself (its schema says nothing of it): writing it in place writes
    h, which the piece before the cut made. Seen by storage, not by schema."""

    def __init__(self):
        super().__init__()
        self.w1, self.w2, self.side = (nn.Parameter(torch.randn(16, 16) / 4) for _ in range(3))
        self.gamma = nn.Parameter(torch.rand(16) + 0.5)

    def forward(self, x):
        h = F.gelu(x[0] @ self.w1) @ self.w2
        s = torch.tanh(x[0] @ self.side)
        torch.broadcast_tensors(h, s)[0].mul_(self.gamma)
        return (h + s).square().mean()


@pytest.mark.parametrize("model", [LayerScaleInPlace, ShapeChangedInPlace, ViewWrittenLater, ConstantMadeInForward,
                                   WrittenThroughAnUnannotatedAlias])
def test_in_place_writes_and_constants_across_pieces(model):
    """Pieces of 1 KiB (a cut is due at every parameter's first use, where one may fall): the loss and every
    gradient as accurate as eager's against an fp64 copy, and the graph still split where it may be."""
    torch.manual_seed(0)
    compiled_model = model()
    eager, exact = model(), model().double()
    eager.load_state_dict(compiled_model.state_dict())
    exact.load_state_dict(compiled_model.state_dict())
    x = torch.randn(1, 8, 32 if model is LayerScaleInPlace else 16)
    compiled = torch.compile(compiled_model, backend="mojo", options={"backward_piece_mb": 1 / 1024})
    results = []
    for m, fn, inp in ((compiled_model, compiled, x), (eager, eager, x), (exact, exact, x.double())):
        loss = fn(inp)
        loss.backward()
        results.append((loss.detach(), *(p.grad for p in m.parameters())))
    assert mojo_compile.last_report().graphs[-1].pieces >= 2
    for i, (mine, theirs, truth) in enumerate(zip(*results)):
        if theirs is None:  # a parameter no gradient reaches (ViewWrittenLater's w1, behind a detach)
            assert mine is None and truth is None, i
            continue
        check_as_accurate(mine, theirs, truth, torch.float32, f"output {i}")


def test_a_graph_input_read_early_and_written_at_the_end_stays_whole():
    """A step counter read at the start and incremented in place at the end (a warmup schedule): every cut would
    fall between the read and the write, so the graph stays one piece."""
    ws = layers(4)
    x, step = torch.randn(3, 64), torch.zeros(())

    def fn(x, step, *ws):
        warm = torch.clamp((step + 1) / 4, max=1.0)
        for w in ws:
            x = torch.tanh(x @ w) * warm
        step.add_(1)
        return x.sum()

    gm = traced(fn, x, step, *ws)
    assert pieces.plan(gm, [x, step, *ws], 16 / 1024) is None


def test_a_value_the_graph_returns_is_not_overwritten_by_a_later_piece_backward():
    """An activation returned beside the loss (hidden states) that a later piece also takes as input: that piece's
    backward must not reuse its buffer (Inductor's donated buffers), or the caller's tensor changes under
    backward()."""
    ws = [nn.Parameter(torch.randn(16, 16) / 4) for _ in range(2)]

    def fn(x, w1, w2):
        a = torch.tanh(x @ w1)
        return torch.tanh(a @ w2).square().sum(), a, a[:2].t()

    x = torch.randn(4, 16)
    loss, a, view = torch.compile(fn, backend="mojo", options={"backward_piece_mb": 1 / 1024})(x, *ws)
    assert mojo_compile.last_report().graphs[-1].pieces == 2
    before = a.detach().clone()
    loss.backward()
    assert torch.equal(a.detach(), before) and torch.equal(view.detach(), before[:2].t())
    eager = torch.tanh(x @ ws[0].detach())
    assert torch.allclose(a.detach(), eager, rtol=1e-6, atol=1e-6)  # fp32: the same ops, Inductor's rounding
