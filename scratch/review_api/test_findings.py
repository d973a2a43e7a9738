"""Findings of the review of the user-fusion API and the debug tools (scratch/review_api/REPORT.md).
Each test fails on the current tree. Each runs its scenario in a fresh process (the pattern registry, Inductor's
record of seen pattern graphs and Dynamo's code cache are process-wide state that the findings are about).

    TRITON_INTERPRET=1 MOJO_CACHE_DIR=/tmp/review_api_cache PYTHONPATH=tests:. \
        timeout 600 .venv/bin/python -m pytest -q scratch/review_api/test_findings.py
"""
import conftest  # noqa: F401  (first: TRITON_INTERPRET, MOJO_CACHE_DIR)
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PRELUDE = """
import conftest  # noqa
import sys
import torch, torch.nn.functional as F
import mojo_compile
OPT = {"inner_compiler": "eager", "target": "torch"}
torch.manual_seed(0)
"""


def run(body: str) -> str:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join(["tests", "."])}
    env.setdefault("MOJO_CACHE_DIR", "/tmp/review_api_cache")
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


# --------------------------------------------------------------------- 1. same-graph patterns: the second is dead
SAME_GRAPH = """
def search(x):
    return torch.sigmoid(x) * 3.0
mojo_compile.register_pattern("userA", search, lambda x: torch.sigmoid(x) * 3.0 + 100, [(torch.randn(4, 8),)])
mojo_compile.register_pattern("userB", search, lambda x: torch.sigmoid(x) * 3.0 + 200, [(torch.randn(4, 8),)],
                              priority=50)
x = torch.randn(3, 8)
def applied(**extra):
    torch._dynamo.reset()
    out = torch.compile(lambda x: torch.sigmoid(x) * 3.0, backend="mojo", options={**OPT, **extra})(x)
    return round((out - search(x)).mean().item())
"""


def test_same_search_higher_priority_pattern_is_ignored():
    """userB (priority 50) should be tried before userA (priority 0): it is never registered (Inductor's
    skip_duplicates), so userA's replacement runs."""
    out = run(SAME_GRAPH + "print(applied())")
    assert out.split()[-1] == "200", out


def test_same_search_pattern_dead_after_the_other_is_disabled():
    out = run(SAME_GRAPH + "print(applied(disable=['userA']))")
    assert out.split()[-1] == "200", out


def test_same_search_pattern_dead_after_the_other_is_unregistered():
    out = run(SAME_GRAPH + "mojo_compile.unregister_pattern('userA'); print(applied())")
    assert out.split()[-1] == "200", out


def test_user_pattern_over_a_builtin_depends_on_whether_a_compile_ran_first():
    """A user pattern with a built-in's search and priority 100 applies when registered before any compile, and is
    silently ignored when a compile already registered the built-in's trace (gated_act.silu keeps the site)."""
    out = run("""
    g, u = torch.randn(2, 5, 64, dtype=torch.bfloat16), torch.randn(2, 5, 64, dtype=torch.bfloat16)
    torch.compile(lambda a, b: F.silu(a) * b, backend="mojo", options=OPT)(g, u)   # an earlier, unrelated compile
    ex = [(torch.randn(2, 3, 8, dtype=torch.bfloat16), torch.randn(2, 3, 8, dtype=torch.bfloat16))]
    mojo_compile.register_pattern("user.swiglu", lambda gate, up: F.silu(gate) * up,
                                  lambda gate, up: F.silu(gate) * up + 100, ex, priority=100)
    out = torch.compile(lambda a, b: F.silu(a) * b + 0, backend="mojo", options=OPT)(g, u)
    print((out - F.silu(g) * u).float().abs().max().item() > 50)
    """)
    assert out.split()[-1] == "True", out


# --------------------------------------------------------------------- 2. registry changes vs Dynamo's code cache
def test_unregistered_pattern_still_runs_in_a_new_compile():
    """unregister_pattern (e.g. to get rid of a wrong fusion), then torch.compile again: the old rewritten code is
    reused from Dynamo's cache and the removed fusion's numbers come back."""
    out = run("""
    def f(x):
        return torch.sigmoid(x) * 3.0
    x = torch.randn(4, 8)
    mojo_compile.register_pattern("user.sig3", f, lambda x: torch.sigmoid(x) * 3.0 + 100, [(torch.randn(4, 8),)])
    def g(x):
        return torch.sigmoid(x) * 3.0
    torch.compile(g, backend="mojo", options=OPT)(x)
    mojo_compile.unregister_pattern("user.sig3")
    print((torch.compile(g, backend="mojo", options=OPT)(x) - g(x)).abs().max().item())
    """)
    assert float(out.split()[-1]) == 0.0, out


def test_pattern_registered_after_a_compile_is_ignored_by_a_new_compile():
    out = run("""
    def f(x):
        return torch.sigmoid(x) * 3.0
    x = torch.randn(4, 8)
    torch.compile(f, backend="mojo", options=OPT)(x)
    mojo_compile.register_pattern("user.sig3", f, lambda x: torch.sigmoid(x) * 3.0 + 100, [(torch.randn(4, 8),)])
    print((torch.compile(f, backend="mojo", options=OPT)(x) - f(x)).abs().max().item())
    """)
    assert float(out.split()[-1]) == 100.0, out


# --------------------------------------------------------------------- 3. a user op without autograd, in training
def test_user_op_without_autograd_fails_the_backward_where_eager_runs():
    out = run("""
    from mojo_compile import lowering
    @torch.library.custom_op("mojo::review_sig3", mutates_args=())
    def review_sig3(x: torch.Tensor, target: str = "torch") -> torch.Tensor:
        return lowering.call("review_sig3", target, x)
    @review_sig3.register_fake
    def _(x, target="torch"):
        return torch.empty_like(x)
    mojo_compile.register_impl("review_sig3", "torch", lambda x: torch.sigmoid(x) * 3.0, **lowering.TRACEABLE)
    def search(x):
        return torch.sigmoid(x) * 3.0
    mojo_compile.register_pattern("user.sig3", search, lambda x: torch.ops.mojo.review_sig3(x),
                                  [(torch.randn(4, 8),)])
    lin = torch.nn.Linear(8, 8)
    x = torch.randn(3, 4, 8)
    search(lin(x)).sum().backward(); ref = lin.weight.grad.clone(); lin.zero_grad()
    torch.compile(lambda x: search(lin(x)).sum(), backend="mojo", options=OPT)(x).backward()
    print(torch.allclose(lin.weight.grad, ref))
    """)
    assert out.split()[-1] == "True", out


# --------------------------------------------------------------------- 4. debug tools: wrong verdicts
def test_verify_says_ok_with_one_element_wrong():
    """A replacement that flips the sign of one element of a 131k-element bf16 output (|diff| 2.1): the normwise
    error 4.4e-3 is under the bound 6.9e-3, so verify says OK (and bisect would find nothing)."""
    out = run("""
    def search(x):
        return torch.sigmoid(x) * 3.0
    def rep(x):
        y = (torch.sigmoid(x) * 3.0).flatten()
        return torch.cat([y[:-1], -y[-1:]]).view(x.shape)
    mojo_compile.register_pattern("user.sig3", search, rep, [(torch.randn(4, 8),)])
    x = torch.randn(4, 128, 256, dtype=torch.bfloat16)
    print(mojo_compile.verify(lambda x: torch.sigmoid(x) * 3.0, x, options=OPT).ok)
    """)
    assert out.split()[-1] == "False", out


def test_bisect_blames_the_inner_compiler_for_a_wrong_graph_pass():
    out = run("""
    aten = torch.ops.aten
    def bad_pass(gm):
        for n in gm.graph.nodes:
            if n.op == "call_function" and n.target == aten.sigmoid.default:
                n.target = aten.tanh.default
        return []
    mojo_compile.register_graph_pass("user.badpass", bad_pass)
    for r in mojo_compile.bisect(lambda x: torch.sigmoid(x) + 1, torch.randn(3, 16), options=OPT):
        print(repr(r.pattern))
    """)
    assert out.split()[-1] == "'user.badpass'", out


def test_bisect_blames_the_pattern_named_like_the_family():
    """'user.tanh5' (wrong, priority 5) and 'user' (right, family 'user'): disabling the name 'user' also disables
    the family, so bisect names the correct pattern 'user'."""
    out = run("""
    mojo_compile.register_pattern("user", lambda x: torch.sigmoid(x) * 3.0, lambda x: torch.sigmoid(x) * 3.0,
                                  [(torch.randn(4, 8),)], family="user")
    mojo_compile.register_pattern("user.tanh5", lambda x: torch.tanh(x) * 5.0, lambda x: torch.tanh(x) * 5.0 + 1,
                                  [(torch.randn(4, 8),)], family="user", priority=5)
    fn = lambda x: torch.sigmoid(x) * 3.0 + torch.tanh(x) * 5.0
    for r in mojo_compile.bisect(fn, torch.randn(3, 16), options=OPT):
        print(repr(r.pattern))
    """)
    assert out.split()[-1] == "'user.tanh5'", out


# --------------------------------------------------------------------- 5. canonicalisation rules from the public API
RULE_GELU = """
from mojo_compile import canonicalize
if RULE:
    canonicalize.register_rule(torch.ops.aten.gelu.default, canonicalize.all_arguments)
g, u = torch.randn(2, 5, 64, dtype=torch.bfloat16), torch.randn(2, 5, 64, dtype=torch.bfloat16)
out = torch.compile(lambda g, u: F.gelu(g) * u, backend="mojo", options=OPT)(g, u)
print([s.pattern for s in mojo_compile.last_report().sites], torch.equal(out, F.gelu(g) * u))
"""


def test_all_arguments_rule_on_an_op_with_keyword_only_arguments_breaks_the_graph():
    """docs/adding-a-fusion.md: `register_rule(op, all_arguments)`. all_arguments writes every argument positionally,
    also gelu's keyword-only `approximate`: the canonical graph calls aten.gelu(x, 'none'), which raises where eager
    runs (`F.gelu(x) + 1` has no site to hide the node)."""
    out = run("""
    from mojo_compile import canonicalize
    canonicalize.register_rule(torch.ops.aten.gelu.default, canonicalize.all_arguments)
    x = torch.randn(2, 5, 64)
    print(torch.equal(torch.compile(lambda x: F.gelu(x) + 1, backend="mojo", options=OPT)(x), F.gelu(x) + 1))
    """)
    assert out.split()[-1] == "True", out


def test_warm_pattern_cache_ignores_a_rule_made_of_mojo_compiles_own_helpers(tmp_path, monkeypatch):
    """A rule whose function is mojo_compile's own (all_arguments) counts as 'ours' (pattern_cache._rules_are_ours):
    the built-in traces are read from a cache written without the rule. In a cold cache gated_act.gelu fuses (the
    malformed gelu node is replaced); with the same cache warmed by an earlier run the cached pattern no longer
    matches the canonicalised graph and the compiled function raises."""
    monkeypatch.setenv("MOJO_CACHE_DIR", str(tmp_path / "warm"))
    run("RULE = False\n" + RULE_GELU)  # warms the cache, as an earlier job would
    warm = run("RULE = True\n" + RULE_GELU)
    assert "gated_act.gelu" in warm, warm


def test_a_run_with_such_a_rule_poisons_the_cache_for_later_runs_without_it(tmp_path, monkeypatch):
    """The other direction: a cold run with the rule writes the built-in traces made under it, under the same keys;
    every later run without the rule (another script, the same cache directory) reads them and misses
    gated_act.gelu (a graph without the rule has aten.gelu(x), the cached pattern aten.gelu(x, 'none'))."""
    monkeypatch.setenv("MOJO_CACHE_DIR", str(tmp_path / "poisoned"))
    run("RULE = True\n" + RULE_GELU)
    later = run("RULE = False\n" + RULE_GELU)
    assert "gated_act.gelu" in later, later
