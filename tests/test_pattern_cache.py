"""pattern_cache: the built-in patterns' registration traces kept on disk, and the search re-traces reused within one
rewrite. What is cached must change nothing: the same graphs, the same matches, the same numbers."""
import inspect
import json
import os
import sys

import pytest
import torch
from torch.fx import GraphModule

import mojo_compile
from mojo_compile import canonicalize, pattern_cache, patterns
from conftest import DEVICE, run_in_fresh_process

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """An empty cache directory, and no shipped traces (test_shipped_* below read those): a first compile traces."""
    monkeypatch.setenv("MOJO_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("MOJO_PATTERN_CACHE", raising=False)
    monkeypatch.setattr(pattern_cache, "_shipped", lambda: None)
    patterns.load_fusions()
    patterns.forget_traces()
    yield tmp_path
    patterns.forget_traces()  # the next test traces under its own cache directory


def entries(directory) -> list:
    folder = directory / "patterns"
    return sorted(os.listdir(folder)) if folder.exists() else []


def register_all() -> None:
    for pattern in patterns.registered_patterns():
        patterns._compile(pattern)


def registered_count() -> int:
    return sum(item.pattern_pass is not None for p in patterns.registered_patterns() for item in p._sets or ())


def record(monkeypatch, name):
    """Every graph pattern_cache.traced returns, by its cache key."""
    seen = {}
    original = getattr(pattern_cache, name)

    def wrapped(key, *rest):
        out = original(key, *rest)
        gm = rest[0] if name == "store" else out
        if gm is not None:
            seen[key] = str(gm.graph)
        return out

    monkeypatch.setattr(pattern_cache, name, wrapped)
    return seen


def test_every_builtin_trace_is_kept_and_comes_back_identical(cache_dir, monkeypatch):
    stored = record(monkeypatch, "store")
    register_all()
    total = registered_count()
    assert len(entries(cache_dir)) == len(stored) >= total > 100  # (duplicate traces are registered once)

    patterns.forget_traces()
    loaded = record(monkeypatch, "load")
    monkeypatch.setattr(patterns, "trace_pre_dispatch", lambda *a, **k: pytest.fail("traced with a warm cache"))
    register_all()
    assert loaded == stored
    assert registered_count() == total


def tiny_llama(family="llama"):
    import transformers
    dims = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=64)
    cfg = transformers.Qwen3Config(**dims, head_dim=16) if family == "qwen3" else transformers.LlamaConfig(**dims)
    torch.manual_seed(0)
    model = (transformers.Qwen3ForCausalLM if family == "qwen3" else transformers.LlamaForCausalLM)(cfg)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model.to(DEVICE).eval()


def compiled_logits(model, ids):
    torch._dynamo.reset()
    out = torch.compile(model, backend="mojo", options={"inner_compiler": "eager", "target": "torch"})(ids).logits
    graph = mojo_compile.last_report().graphs[0]
    return out, graph.counts()


def test_a_model_compiles_the_same_cold_and_warm(cache_dir, monkeypatch):
    model, ids = tiny_llama(), torch.randint(0, 128, (2, 11), device=DEVICE)
    with torch.no_grad():
        cold, cold_counts = compiled_logits(model, ids)
        assert entries(cache_dir)
        patterns.forget_traces()
        warm, warm_counts = compiled_logits(model, ids)
        monkeypatch.setenv("MOJO_PATTERN_CACHE", "0")
        patterns.forget_traces()
        traced, traced_counts = compiled_logits(model, ids)
    assert cold_counts == warm_counts == traced_counts and cold_counts.get("mojo.rms_norm")
    assert torch.equal(cold, warm) and torch.equal(cold, traced)


def test_summaries_describe_the_registered_patterns(cache_dir):
    """Each set's summary is what Inductor registered: the size the rewrite orders by (the pattern's nodes), and the
    ops of its pattern, each an op of the search function's trace (a duplicate set's too)."""
    register_all()
    kept = pattern_cache.summaries()
    duplicates = 0
    for pattern in patterns.registered_patterns():
        assert kept[pattern.name] == [(item.targets, item.size) for item in pattern._sets], pattern.name
        for item in pattern._sets:
            traced = patterns.trace_pre_dispatch(pattern.search, _trace_args(pattern, item.inputs))
            ops = {patterns._target_name(n.target) for n in traced.graph.nodes if n.op == "call_function"}
            assert item.targets and item.targets <= ops, (pattern.name, item.targets - ops)
            duplicates += item.pattern_pass is None
            for entries in (item.pattern_pass.patterns.values() if item.pattern_pass else ()):
                for entry in entries:
                    assert patterns._pattern_summary(entry.pattern) == (item.targets, item.size), pattern.name
    assert duplicates  # (the fp32 forms of several spellings trace alike)
    pattern_cache.save_summaries()
    assert pattern_cache._read_summaries(_summaries_path()) == kept


def _trace_args(pattern, inputs):
    """The arguments register_replacement traces the search function with: the inputs, scalars in their places."""
    names, inputs, args = list(inspect.signature(pattern.search).parameters), list(inputs), []
    for name in names:
        args.append(pattern.scalars[name] if name in pattern.scalars else inputs.pop(0))
    return args


def _summaries_path():
    return pattern_cache._summaries_file()["path"]


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_a_warm_rewrite_registers_only_the_patterns_the_graph_can_have(cache_dir, family):
    """With the summaries of a first process, a rewrite registers only the sets whose ops are all in the graph --
    including the ops an earlier replacement puts there (qk-norm + RoPE is made of mojo.rms_norm and mojo.rope) --
    and fuses exactly what registering every set fuses."""
    model, ids = tiny_llama(family), torch.randint(0, 128, (2, 11), device=DEVICE)
    with torch.no_grad():
        cold, cold_counts = compiled_logits(model, ids)
        total = sum(len(p._sets) for p in patterns.registered_patterns())
        assert all(item.registered for p in patterns.registered_patterns() for item in p._sets)
        pattern_cache._SUMMARIES.clear()  # a new process: the summaries come from the file
        patterns.forget_traces()
        warm, warm_counts = compiled_logits(model, ids)
    registered = [p.family for p in patterns.registered_patterns() for item in p._sets if item.registered]
    assert len(registered) < total and not {"layer_norm", "cross_entropy", "linear_cross_entropy"} & set(registered)
    assert warm_counts == cold_counts and torch.equal(warm, cold)
    if family == "qwen3":
        assert warm_counts.get("mojo.qk_norm_rope") == 3 and "qk_norm_rope" in registered


def test_warm_cache_ahead_leaves_a_first_compile_nothing_to_trace(cache_dir, monkeypatch, capsys):
    """`mojo-compile warm-cache` (e.g. when a serving image is built) traces every built-in set: a later process's
    first compile reads every registration trace and every summary, and fuses what a cold compile fuses."""
    from mojo_compile import cli

    assert cli.main(["warm-cache"]) == 0
    total = sum(len(p._sets) for p in patterns.registered_patterns() if p.builtin)
    assert f"{total} pattern input sets traced into {cache_dir}" in capsys.readouterr().out
    assert len(entries(cache_dir)) >= registered_count() > 100

    pattern_cache._SUMMARIES.clear()  # a new process: the summaries come from the file
    patterns.forget_traces()
    monkeypatch.setattr(patterns, "_registration_trace", lambda *a: pytest.fail("a registration trace"))
    model, ids = tiny_llama(), torch.randint(0, 128, (2, 11), device=DEVICE)
    with torch.no_grad():
        warm, counts = compiled_logits(model, ids)
    assert counts.get("mojo.rms_norm") and torch.equal(warm, model(ids).logits)

    monkeypatch.setenv("MOJO_PATTERN_CACHE", "0")
    assert cli.main(["warm-cache"]) == 1
    assert "the pattern cache is off" in capsys.readouterr().err


def test_switched_off_it_neither_reads_nor_writes(cache_dir, monkeypatch):
    monkeypatch.setenv("MOJO_PATTERN_CACHE", "0")
    monkeypatch.setattr(pattern_cache, "load", lambda key: pytest.fail("read"))
    register_all()
    assert entries(cache_dir) == []


def test_user_patterns_always_trace(cache_dir):
    def search(x, w):
        return x * w + 1.5

    def replace(x, w):
        return torch.addcmul(torch.full_like(x, 1.5), x, w)

    x = torch.randn(4, 8)
    try:
        mojo_compile.register_pattern("user.cache_probe", search, replace, (x, torch.randn(8)))
        pattern = patterns._PATTERNS["user.cache_probe"]
        assert not pattern.builtin and all(item.pattern_pass for item in pattern._sets)
        assert entries(cache_dir) == []  # lazy=False: traced at registration, and not kept
    finally:
        mojo_compile.unregister_pattern("user.cache_probe")


def _user_rule(node):
    return None


def test_a_foreign_canonicalisation_rule_turns_the_cache_off(cache_dir, monkeypatch):
    x = torch.randn(2, 3)
    assert pattern_cache.entry_key("p", [x]) is not None
    monkeypatch.setitem(canonicalize.RULES, torch.ops.aten.sin.default, _user_rule)
    assert pattern_cache.entry_key("p", [x]) is None


def test_the_key_tells_apart_everything_that_changes_a_trace(monkeypatch):
    x = torch.randn(4, 8)
    base = pattern_cache.entry_key("p", [x, 1e-6])
    variants = [("q", [x, 1e-6]), ("p", [x.bfloat16(), 1e-6]), ("p", [torch.randn(4, 9), 1e-6]),
                ("p", [x.t().contiguous().t(), 1e-6]), ("p", [x.requires_grad_(False).clone().requires_grad_(), 1e-6]),
                ("p", [x, 1e-5]), ("p", [x, 1]), ("p", [x[1:], 1e-6]), ("p", [x, True])]
    keys = {pattern_cache.entry_key(name, args) for name, args in variants}
    assert base not in keys and len(keys) == len(variants)
    monkeypatch.setattr(pattern_cache, "_package_hash", lambda: "another source")
    assert pattern_cache.entry_key("p", [x, 1e-6]) != base


def test_a_damaged_entry_is_traced_again_and_rewritten(cache_dir):
    register_all()
    name = entries(cache_dir)[0]
    path = cache_dir / "patterns" / name
    good = path.read_text()
    path.write_text(good[: len(good) // 2])
    patterns.forget_traces()
    register_all()
    assert path.read_text() == good


def test_what_json_cannot_name_is_not_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("MOJO_CACHE_DIR", str(tmp_path))

    class WithConstant(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("c", torch.randn(3))

        def forward(self, x):
            return x + self.c

    gm = torch.fx.symbolic_trace(WithConstant())  # a get_attr node
    assert not pattern_cache.store("k", gm)
    plain = patterns.trace_pre_dispatch(lambda x: (x[1:, None] + 2.0).to(torch.bfloat16).sum((0, 1)),
                                        [torch.randn(5, 3)])
    assert pattern_cache.store("k2", plain)
    rebuilt = pattern_cache.load("k2")
    assert isinstance(rebuilt, GraphModule) and str(rebuilt.graph) == str(plain.graph)
    x = torch.randn(5, 3)
    assert torch.equal(rebuilt(x), plain(x))
    assert json.loads((tmp_path / "patterns" / "k2.json").read_text())


def test_search_retraces_are_reused_within_a_rewrite_only(cache_dir, monkeypatch):
    """Layers with the same shapes share a search re-trace; the matches and numbers are those of tracing each."""
    model, ids = tiny_llama(), torch.randint(0, 128, (2, 11), device=DEVICE)
    traces = []
    original = patterns.trace_pre_dispatch
    monkeypatch.setattr(patterns, "trace_pre_dispatch", lambda fn, args, **k: traces.append(fn) or original(fn, args))
    with torch.no_grad():
        register_all()
        traces.clear()
        reused, reused_counts = compiled_logits(model, ids)
        reused_traces = len(traces)
        assert not patterns._RETRACES  # nothing held after the rewrite
        monkeypatch.setattr(patterns._Tracer, "__call__", _always_trace)
        traces.clear()
        each, each_counts = compiled_logits(model, ids)
    assert reused_counts == each_counts and torch.equal(reused, each)
    assert reused_traces < len(traces)


def _always_trace(self, fn, args, **_):
    return patterns.trace_pre_dispatch(fn, args)


# ------------------------------------------------------------------------------------- the mask prover's answers
def _count_proofs(monkeypatch):
    from mojo_compile.patterns import mask_algebra
    proofs = []
    original = mask_algebra._prove_equivalent

    def counting(expr, target):
        proofs.append((expr, target))
        return original(expr, target)
    monkeypatch.setattr(mask_algebra, "_prove_equivalent", counting)
    return proofs


def _window_formulas():
    """A causal window of 3 spelled two ways (equal), and the same against a window of 4 (not equal)."""
    import sympy
    from mojo_compile.patterns.mask_algebra import X
    i, j = X(2), X(3)
    spelled = sympy.And(sympy.Le(j - i, 0), sympy.Not(sympy.Le(j, i - 3)))
    return spelled, sympy.And(sympy.Gt(j, i - 3), sympy.Le(j, i)), sympy.And(sympy.Gt(j, i - 4), sympy.Le(j, i))


def test_mask_proofs_are_remembered_across_processes(cache_dir, monkeypatch):
    from mojo_compile.patterns.mask_algebra import equivalent
    monkeypatch.setattr(pattern_cache, "_ANSWERS", {})
    proofs = _count_proofs(monkeypatch)
    spelled, window3, window4 = _window_formulas()
    assert equivalent(spelled, window3) and not equivalent(spelled, window4)
    asked = len(proofs)
    assert asked >= 1 and len(os.listdir(cache_dir / "answers")) == asked  # each proof written down
    assert equivalent(spelled, window3) and len(proofs) == asked  # the same process: from memory
    monkeypatch.setattr(pattern_cache, "_ANSWERS", {})  # a new process: from the disk, the same answers
    assert equivalent(spelled, window3) and not equivalent(spelled, window4) and len(proofs) == asked


def test_a_damaged_or_foreign_answer_is_proved_again(cache_dir, monkeypatch):
    from mojo_compile.patterns.mask_algebra import equivalent
    monkeypatch.setattr(pattern_cache, "_ANSWERS", {})
    spelled, window3, _ = _window_formulas()
    assert equivalent(spelled, window3)
    (entry,) = (cache_dir / "answers").iterdir()
    stored = json.loads(entry.read_text())
    for damage in ("{not json", json.dumps({"question": stored["question"] + " ", "answer": False})):
        entry.write_text(damage)  # unreadable, or the answer to another question under this key
        monkeypatch.setattr(pattern_cache, "_ANSWERS", {})
        proofs = _count_proofs(monkeypatch)
        assert equivalent(spelled, window3) and len(proofs) == 1
        assert json.loads(entry.read_text()) == stored  # rewritten


def test_no_answer_is_kept_with_the_cache_off(cache_dir, monkeypatch):
    from mojo_compile.patterns.mask_algebra import equivalent
    monkeypatch.setenv("MOJO_PATTERN_CACHE", "0")
    monkeypatch.setattr(pattern_cache, "_ANSWERS", {})
    spelled, window3, _ = _window_formulas()
    assert equivalent(spelled, window3)
    assert not (cache_dir / "answers").exists()


def _causal_sdpa(q, k, v):
    s = q.shape[2]
    i = torch.arange(s, device=q.device)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=i[None, :] <= i[:, None])


def test_a_remembered_proof_gives_the_same_rewrite(cache_dir, monkeypatch):
    """dynamic=True: the mask is proven causal as a formula. Proved in one "process", remembered in the next: the
    same report, eager's numbers, and no proof the second time."""
    q, k, v = (torch.randn(2, 2, 9, 8, device=DEVICE) for _ in range(3))
    reports = []
    for _ in range(2):
        monkeypatch.setattr(pattern_cache, "_ANSWERS", {})
        proofs = _count_proofs(monkeypatch)
        torch._dynamo.reset()
        mojo_compile.reset_report()
        got = torch.compile(_causal_sdpa, backend="mojo", dynamic=True)(q, k, v)
        torch.testing.assert_close(got, _causal_sdpa(q, k, v), rtol=1e-5, atol=1e-5)
        reports.append(([(s.op, s.detail) for s in mojo_compile.last_report().sites], len(proofs)))
    (sites, proved), (sites_again, proved_again) = reports
    assert sites == sites_again and any("causal" in detail for _, detail in sites), sites
    assert proved >= 1 and proved_again == 0


def test_a_users_rule_made_of_this_packages_helpers_is_foreign(cache_dir, monkeypatch):
    """The (op, rule) pair decides, not the rule function's module: all_arguments registered by a user for gelu
    keeps no trace, and the built-in pairs (LayerNorm's all_arguments included) still do."""
    x = torch.randn(2, 3)
    assert canonicalize.RULES[torch.ops.aten.layer_norm.default] is canonicalize.all_arguments
    assert pattern_cache.entry_key("p", [x]) is not None
    monkeypatch.setitem(canonicalize.RULES, torch.ops.aten.gelu.default, canonicalize.all_arguments)
    assert pattern_cache.entry_key("p", [x]) is None and pattern_cache.summaries() == {}


def test_the_key_holds_the_set_of_rules(monkeypatch):
    """A trace is made under one set of (op, rule) pairs: one made under another set has another key."""
    x = torch.randn(4, 8)
    base = pattern_cache.entry_key("p", [x])
    monkeypatch.delitem(canonicalize.RULES, torch.ops.aten.square.default)
    assert pattern_cache.entry_key("p", [x]) not in (base, None)


GELU_UNDER_A_RULE = """
import conftest  # noqa: F401
import sys
import torch, torch.nn.functional as F
import mojo_compile
from mojo_compile import canonicalize
if sys.argv[1] == "rule":
    canonicalize.register_rule(torch.ops.aten.gelu.default, canonicalize.all_arguments)
torch.manual_seed(int(sys.argv[2]))
g, u = torch.randn(2, 5, 64, dtype=torch.bfloat16), torch.randn(2, 5, 64, dtype=torch.bfloat16)
out = torch.compile(lambda g, u: F.gelu(g) * u, backend="mojo", options={"inner_compiler": "eager",
                                                                         "target": "torch"})(g, u)
torch.testing.assert_close(out, F.gelu(g) * u)  # eager's values (bf16's default tolerance)
print(*[s.pattern for s in mojo_compile.last_report().sites])
"""


def _gelu_process(cache, rule: bool, seed: int) -> list:
    """The sites of `F.gelu(g) * u` compiled in a fresh process with the cache directory `cache`, with or without
    the user's `register_rule(aten.gelu.default, all_arguments)` (the rule set is process-wide)."""
    return run_in_fresh_process(GELU_UNDER_A_RULE, "rule" if rule else "none", str(seed), cache_dir=cache,
                                timeout=300).split()


@pytest.mark.parametrize("first_rule, then_rule", [(False, True), (True, False)])
def test_a_process_with_a_users_rule_neither_reads_nor_writes_the_builtins_traces(tmp_path, first_rule, then_rule):
    """Two processes sharing a fresh cache directory, one with the user's gelu rule: the second fuses
    gated_act.gelu as a cold process does -- a cache warmed without the rule is not read under it (stale), and a run
    with the rule leaves no trace made under it for later runs without it (poisoned)."""
    assert _gelu_process(tmp_path, first_rule, 0) == ["gated_act.gelu"]
    assert _gelu_process(tmp_path, then_rule, 1) == ["gated_act.gelu"]


# -- the traces shipped with the package ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def shipped_dir(tmp_path_factory):
    """This source's shipped file for this torch and Python, made anew (as `mojo-compile warm-cache --ship` does)."""
    directory = tmp_path_factory.mktemp("shipped")
    patterns.load_fusions()
    path, count = pattern_cache.ship(str(directory))
    assert os.path.basename(path) == pattern_cache.shipped_name() and count > 100
    return directory


@pytest.fixture
def shipped(shipped_dir, tmp_path, monkeypatch):
    """An empty cache directory, with the shipped traces read from `shipped_dir`."""
    monkeypatch.setenv("MOJO_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("MOJO_PATTERN_CACHE", raising=False)
    monkeypatch.setattr(pattern_cache, "SHIPPED_DIR", str(shipped_dir))
    pattern_cache._shipped.cache_clear()
    pattern_cache._SUMMARIES.clear()
    patterns.forget_traces()
    yield tmp_path
    pattern_cache._shipped.cache_clear()
    patterns.forget_traces()


def _read_shipped(path) -> dict:
    import gzip
    with gzip.open(path, "rt") as f:
        return json.load(f)


def test_the_packaged_traces_are_this_sources(shipped_dir):
    """The file the package ships for this torch and Python holds what tracing this source gives now: every graph
    and summary (a file made before the last change to the package is never read, and a first compile traces;
    remake it with `mojo-compile warm-cache --ship`). Where none is shipped for this torch and Python, there is
    nothing to check."""
    packaged = os.path.join(ROOT, "mojo_compile", "pattern_data", pattern_cache.shipped_name())
    if not os.path.exists(packaged):
        pytest.skip(f"no traces are shipped for torch {torch.__version__} and Python {sys.version.split()[0]}")
    made, kept = _read_shipped(shipped_dir / pattern_cache.shipped_name()), _read_shipped(packaged)
    assert kept["package"] == made["package"], "the shipped traces are stale: run `mojo-compile warm-cache --ship`"
    assert kept["entries"] == made["entries"] and kept["summaries"] == made["summaries"]


def test_a_first_compile_traces_nothing_with_the_shipped_traces(shipped, monkeypatch):
    """In an empty cache directory, every registration trace and every summary comes from the shipped file: a first
    compile fuses what a traced one does, with the same numbers, and writes no trace to the cache directory."""
    model, ids = tiny_llama(), torch.randint(0, 128, (2, 11), device=DEVICE)
    real = patterns._registration_trace
    with torch.no_grad():
        monkeypatch.setattr(patterns, "_registration_trace", lambda *a: pytest.fail("a registration trace"))
        fused, counts = compiled_logits(model, ids)
        assert entries(shipped) == []
        monkeypatch.setattr(patterns, "_registration_trace", real)
        monkeypatch.setenv("MOJO_PATTERN_CACHE", "0")
        patterns.forget_traces()
        traced, traced_counts = compiled_logits(model, ids)
        expected = model.double()(ids).logits
    assert counts == traced_counts and counts.get("mojo.rms_norm") and counts.get("mojo.attention")
    assert torch.equal(fused, traced)
    torch.testing.assert_close(fused.double(), expected, rtol=0, atol=1e-4)  # (fp32 against fp64: rounding only)


def test_a_stale_shipped_file_is_not_read(shipped, monkeypatch):
    """Shipped traces made from another source of the package are not read: the patterns trace, as in a fresh
    cache directory, and fuse the same."""
    monkeypatch.setattr(pattern_cache, "_package_hash", lambda: "another source")
    assert pattern_cache._shipped() is None and pattern_cache.summaries() == {}
    calls = []
    real = patterns._registration_trace
    monkeypatch.setattr(patterns, "_registration_trace", lambda *a: calls.append(1) or real(*a))
    model, ids = tiny_llama(), torch.randint(0, 128, (2, 11), device=DEVICE)
    with torch.no_grad():
        _, counts = compiled_logits(model, ids)
    assert calls and counts.get("mojo.rms_norm")


def test_shipped_traces_are_not_read_with_the_cache_off_or_a_users_rule(shipped, monkeypatch):
    assert pattern_cache._shipped() is not None
    monkeypatch.setattr(pattern_cache, "_shipped_trace", lambda parts: pytest.fail("a shipped trace read"))
    monkeypatch.setattr(pattern_cache, "_shipped_summaries", lambda rules: pytest.fail("shipped summaries read"))
    monkeypatch.setenv("MOJO_PATTERN_CACHE", "0")
    register_all()
    assert pattern_cache.summaries() == {}
    monkeypatch.delenv("MOJO_PATTERN_CACHE")
    patterns.forget_traces()
    monkeypatch.setitem(canonicalize.RULES, torch.ops.aten.sin.default, _user_rule)
    register_all()
    assert pattern_cache.summaries() == {}


def test_shipping_leaves_the_callers_cache_directory_alone(shipped, tmp_path_factory):
    directory = tmp_path_factory.mktemp("again")
    pattern_cache.ship(str(directory))
    assert os.environ["MOJO_CACHE_DIR"] == str(shipped) and entries(shipped) == []
    assert _read_shipped(directory / pattern_cache.shipped_name())["entries"]


def _fresh_process(code: str, cache) -> str:
    """`code` after the shared imports, in a fresh process with the cache directory `cache` (pattern registry,
    Inductor's records of seen pattern graphs and the shipped file's memo are process-wide); its stdout."""
    prelude = ("import conftest\nimport tempfile\nimport torch\nimport mojo_compile\n"
               "from mojo_compile import canonicalize, pattern_cache, patterns\n")
    return run_in_fresh_process(prelude + code, cache_dir=cache, timeout=300)


@pytest.mark.parametrize("then", ["ship", "rule"])
def test_a_users_pattern_still_fuses_after_the_traces_are_forgotten(tmp_path, then):
    """Shipping, or a new canonicalisation rule, makes every pattern trace again on next use (forget_traces). A
    user's pattern keeps its own record of the graphs it registered (to tell its duplicates apart): that record goes
    with its sets, or the pattern is skipped as a duplicate of itself and never fuses again."""
    out = _fresh_process(f"""
def search(x):
    return torch.sigmoid(x) * 3.0
mojo_compile.register_pattern("user.sigmoid3", search, lambda x: torch.sigmoid(x) * 3.0 + 100,
                              [(torch.randn(4, 8),)])
x = torch.randn(3, 8)
def fused():
    torch._dynamo.reset()
    out = torch.compile(search, backend="mojo", options={{"inner_compiler": "eager", "target": "torch"}})(x)
    return torch.allclose(out, search(x) + 100)  # (the replacement adds 100: it ran)
print("before", fused())
if "{then}" == "ship":
    pattern_cache.ship(tempfile.mkdtemp())
else:
    canonicalize.register_rule(torch.ops.aten.sin.default, lambda node: None)
print("after", fused())
""", tmp_path)
    assert out.split() == ["before", "True", "after", "True"], out


def test_shipping_leaves_out_a_builtin_trace_the_cache_cannot_keep(tmp_path):
    """A built-in whose trace JSON cannot name (a complex scalar) is not kept in the cache directory, and not
    shipped either: it traces at first use, and shipping the rest goes on."""
    out = _fresh_process("""
patterns.load_fusions()
namespace = {"__name__": "mojo_compile.patterns.rope", "torch": torch, "register_pattern": patterns.register_pattern}
exec("register_pattern('rope.complex_turn', lambda x: torch.view_as_real(torch.view_as_complex(x) * 1j), "
     "lambda x: torch.view_as_real(torch.view_as_complex(x) * 1j) + 0, [(torch.randn(4, 2),)], lazy=True)",
     namespace)
assert patterns._PATTERNS["rope.complex_turn"].builtin
total = patterns.warm_cache()
path, count = pattern_cache.ship(tempfile.mkdtemp())
print(count, total)
""", tmp_path)
    count, total = map(int, out.split())
    assert count == total - 1, out


def _rewrite_shipped(directory, change) -> None:
    import gzip
    path = directory / pattern_cache.shipped_name()
    data = json.loads(gzip.decompress(path.read_bytes()))
    path.write_bytes(gzip.compress(json.dumps(change(data)).encode()))


def _norm_then_swiglu(x, w):
    h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    return torch.nn.functional.silu(h) * h


def test_a_shipped_entry_this_process_cannot_rebuild_is_traced(shipped, shipped_dir, tmp_path_factory, monkeypatch):
    """A shipped file made from this source can still name an op this process lacks (a build of the same torch
    release with other ops): that entry traces, and the compile fuses as without the file."""
    directory = tmp_path_factory.mktemp("foreign_op")
    (directory / pattern_cache.shipped_name()).write_bytes((shipped_dir / pattern_cache.shipped_name()).read_bytes())

    def rename_rsqrt(data):
        for nodes in data["entries"].values():
            for node in nodes:
                if isinstance(node[2], dict) and node[2].get("op") == ["aten", "rsqrt", "default"]:
                    node[2]["op"] = ["aten", "rsqrt_of_another_build", "default"]
        return data

    _rewrite_shipped(directory, rename_rsqrt)
    monkeypatch.setattr(pattern_cache, "SHIPPED_DIR", str(directory))
    pattern_cache._shipped.cache_clear()
    assert pattern_cache._shipped() is not None  # this source's hash: the file is read
    x, w = torch.randn(2, 5, 64), torch.randn(64)
    torch._dynamo.reset()
    out = torch.compile(_norm_then_swiglu, backend="mojo", options={"inner_compiler": "eager", "target": "torch"})(x, w)
    torch.testing.assert_close(out, _norm_then_swiglu(x.double(), w.double()).float())
    assert mojo_compile.last_report().graphs[0].counts().get("mojo.rms_norm") == 1


@pytest.mark.parametrize("layout", ["a list", "no entries", "entries in a list"])
def test_a_shipped_file_of_another_layout_is_not_read(shipped, tmp_path_factory, monkeypatch, layout):
    """A file of this source (its hash) whose JSON is not the shipped layout: not read, the patterns trace."""
    import gzip
    header = {"format": pattern_cache.FORMAT, "package": pattern_cache._package_hash()}
    payload = {"a list": [header], "no entries": {**header, "summaries": {}},
               "entries in a list": {**header, "entries": [], "summaries": {}}}[layout]
    directory = tmp_path_factory.mktemp("layout")
    (directory / pattern_cache.shipped_name()).write_bytes(gzip.compress(json.dumps(payload).encode()))
    monkeypatch.setattr(pattern_cache, "SHIPPED_DIR", str(directory))
    pattern_cache._shipped.cache_clear()
    assert pattern_cache._shipped() is None
    x, w = torch.randn(2, 5, 64), torch.randn(64)
    torch._dynamo.reset()
    out = torch.compile(_norm_then_swiglu, backend="mojo", options={"inner_compiler": "eager", "target": "torch"})(x, w)
    torch.testing.assert_close(out, _norm_then_swiglu(x.double(), w.double()).float())
    assert mojo_compile.last_report().graphs[0].counts().get("mojo.rms_norm") == 1


def test_a_registration_graph_prints_the_same_traced_or_read(cache_dir):
    """Inductor tells duplicate registrations apart by the printed module, name included: a kept trace is registered
    in its rebuilt form whether this process traced it or read it, so which sets count as duplicates does not depend
    on where their graphs came from."""
    def rms_search(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    args = [torch.randn(4, 8), torch.randn(8)]
    first = pattern_cache.traced("probe.rms", patterns._registration_trace, rms_search, args)
    again = pattern_cache.traced("probe.rms", lambda *a: pytest.fail("traced again"), rms_search, args)
    assert str(first) == str(again) and str(first.graph) == str(patterns._registration_trace(rms_search, args).graph)
