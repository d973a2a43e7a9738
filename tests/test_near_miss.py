"""Near misses: each site the rewrite left unfused is reported once -- in GraphReport.near_misses and as one note --
with the pattern of its family that came closest and what refused it: the node that differed (an op, a dim, a cast's
dtype) or the check that said no, with its reason (mojo_compile/near_miss.py)."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import mojo_compile
from conftest import DEVICE
from mojo_compile.patterns import refuse

EPS = 1e-6
aten = torch.ops.aten


def compiled(fn, **options):
    return torch.compile(fn, backend="mojo", dynamic=False,
                         options={"inner_compiler": "eager", "target": "torch", **options})


def only_graph():
    graphs = mojo_compile.last_report().graphs
    assert len(graphs) == 1, graphs
    return graphs[0]


def unfused_notes(graph):
    return [n for n in graph.notes if "left unfused" in n]


class OtherDimNorm(nn.Module):  # the Llama spelling, reduced over dim 1 of a 3-D input
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(n))

    def forward(self, x):
        h = x.float()
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(1, keepdim=True) + EPS)).to(x.dtype)


class RstdToHalf(nn.Module):  # DeepSeek-V4's unweighted norm, the inverse root cast to fp16, not to x's dtype
    def forward(self, x):
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + EPS).to(torch.float16)


class UpcastToHalf(OtherDimNorm):  # the Llama spelling computed in fp16 instead of fp32
    def forward(self, x):
        h = x.to(torch.float16)
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype)


class Wrap(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.norm = inner

    def forward(self, x):
        return self.norm(x)


def test_norm_over_the_wrong_dim_is_one_site_with_the_dim():
    module = Wrap(OtherDimNorm(64)).to(DEVICE, torch.bfloat16)
    x = torch.randn(2, 8, 64, device=DEVICE, dtype=torch.bfloat16)
    out = compiled(module)(x)
    assert torch.equal(out, module(x))
    graph = only_graph()
    assert graph.sites == []
    [miss] = graph.near_misses  # one site, although rms_norm and add_rms_norm share its tell-tale
    assert miss.family == "rms_norm" and miss.source == "norm" and miss.ops == ["aten.rsqrt.default"]
    assert miss.pattern.startswith("rms_norm.") and miss.pattern in {p.name for p in mojo_compile.registered_patterns()}
    assert "aten.mean.dim" in miss.reason and "dim -2" in miss.reason and "-1" in miss.reason, miss.reason
    [note] = unfused_notes(graph)
    assert note.startswith("rms_norm: 1 aten.rsqrt.default left unfused at norm; closest rms_norm."), note
    assert miss.reason in note


@pytest.mark.parametrize("make", [RstdToHalf, lambda: UpcastToHalf(64)], ids=["rstd cast", "upcast"])
def test_cast_to_another_dtype_names_the_cast(make):
    module = Wrap(make()).to(DEVICE, torch.bfloat16)
    x = torch.randn(2, 8, 64, device=DEVICE, dtype=torch.bfloat16)
    compiled(module)(x)
    [miss] = only_graph().near_misses
    assert miss.family == "rms_norm" and miss.pattern.startswith("rms_norm."), miss
    assert "aten.to.dtype" in miss.reason and "dtype torch.float16" in miss.reason, miss.reason


def test_gated_mlp_with_an_unsupported_activation():
    def mlp(x, wg, wu):
        return F.relu(F.linear(x, wg)) * F.linear(x, wu)

    x, wg, wu = torch.randn(2, 3, 16, device=DEVICE), torch.randn(32, 16, device=DEVICE), \
        torch.randn(32, 16, device=DEVICE)
    compiled(mlp)(x, wg, wu)
    graph = only_graph()
    [miss] = graph.near_misses
    assert miss.family == "gated_act" and miss.pattern.startswith("gated_act"), miss
    assert sorted(miss.ops) == ["aten.mul.Tensor", "aten.relu.default"]
    assert "aten.relu.default" in miss.reason and "where the pattern has" in miss.reason, miss.reason
    [note] = unfused_notes(graph)
    assert note.startswith("gated_act: 2 aten.mul.Tensor, aten.relu.default left unfused"), note


def test_attention_refused_by_its_check_says_why():
    def attention(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    q = torch.randn(1, 2, 3, 8, device=DEVICE)
    k, v = torch.randn(1, 2, 5, 8, device=DEVICE), torch.randn(1, 2, 5, 8, device=DEVICE)
    compiled(attention)(q, k, v)
    graph = only_graph()
    [miss] = graph.near_misses
    assert miss.family == "attention" and miss.ops == ["aten.scaled_dot_product_attention.default"]
    assert miss.pattern.startswith("attention.sdpa.") and ".causal" in miss.pattern, miss
    assert "is_causal with 3 queries and 5 keys" in miss.reason, miss.reason
    [note] = unfused_notes(graph)
    assert note.startswith("attention: 1 aten.scaled_dot_product_attention.default left unfused"), note


def test_rope_of_q_and_k_is_one_site():
    def rotate_half(x):
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    def rope(q, k, cos, sin):
        c, s = cos.unsqueeze(1), sin.unsqueeze(1)
        return q * c + rotate_half(q) * s, k * c + rotate_half(k) * s

    q, k = torch.randn(1, 4, 3, 8, device=DEVICE), torch.randn(1, 2, 3, 8, device=DEVICE)
    cos = torch.randn(1, 3, 8, device=DEVICE, requires_grad=True)  # a learnable table: the op gives it no gradient
    compiled(rope)(q, k, cos, torch.randn(1, 3, 8, device=DEVICE))
    [miss] = only_graph().near_misses
    assert miss.family == "rope" and miss.pattern.startswith("rope."), miss
    assert "gradient" in miss.reason, miss.reason


@pytest.mark.parametrize("refusing", ["plain False", "refuse()"])
def test_user_extra_check_reason(refusing):
    name, family = f"test_near_miss.{refusing}", "test_near_miss_gate"
    if refusing == "plain False":  # two spellings: one search graph may be registered once per process
        search, check, reason = (lambda a, b: torch.relu(a) * b), (lambda m: False), "extra_check <lambda> refused"
    else:
        search, check, reason = (lambda a, b: b * torch.relu(a)), (lambda m: refuse("not this one")), "not this one"
    example = (torch.randn(2, 3, 8), torch.randn(2, 3, 8))
    mojo_compile.register_pattern(name, search, search, example, extra_check=check, family=family,
                                  tell_tales=(aten.relu.default,))
    try:
        x, y = torch.randn(4, 8, device=DEVICE), torch.randn(4, 8, device=DEVICE)
        out = compiled(search)(x, y)
        assert torch.equal(out, search(x, y))
        graph = only_graph()
        [miss] = graph.near_misses  # its tell-tale and the gated-MLP shape are one site
        assert (miss.family, miss.pattern, miss.reason) == (family, name, reason), miss
        [note] = unfused_notes(graph)
        assert note.startswith(f"{family}: ") and note.endswith(f"closest {name}: {reason}"), note
    finally:
        mojo_compile.unregister_pattern(name)


class FusedBlock(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.norm = nn.RMSNorm(n, eps=EPS)
        self.q, self.k, self.v = (nn.Linear(n, n, bias=False) for _ in range(3))
        self.gate, self.up = nn.Linear(n, 2 * n, bias=False), nn.Linear(n, 2 * n, bias=False)

    def forward(self, x):
        h = self.norm(x)
        b, s, _ = h.shape
        q, k, v = (p(h).view(b, s, 2, -1).transpose(1, 2) for p in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, -1)
        return F.silu(self.gate(a)) * self.up(a)


def test_fully_fused_model_has_no_near_misses():
    block = FusedBlock(32).to(DEVICE)
    compiled(block)(torch.randn(2, 5, 32, device=DEVICE))
    graph = only_graph()
    assert set(graph.counts()) == {"mojo.rms_norm", "mojo.attention", "mojo.gated_act"}, graph.counts()
    assert graph.near_misses == [] and unfused_notes(graph) == []


def test_two_unfused_norms_are_two_sites():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = OtherDimNorm(64), OtherDimNorm(64)

        def forward(self, x):
            return self.b(self.a(x) * 2)

    compiled(Two().to(DEVICE))(torch.randn(2, 8, 64, device=DEVICE))
    graph = only_graph()
    assert [m.source for m in graph.near_misses] == ["a", "b"]
    assert len(unfused_notes(graph)) == 2


def test_a_failure_to_explain_is_a_reason_not_an_error(monkeypatch):
    from mojo_compile import near_miss

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(near_miss, "_closest", boom)
    module = Wrap(OtherDimNorm(64)).to(DEVICE)
    x = torch.randn(2, 8, 64, device=DEVICE)
    assert torch.equal(compiled(module)(x), module(x))
    [miss] = only_graph().near_misses
    assert miss.reason == "could not explain: RuntimeError: boom" and miss.pattern == ""
