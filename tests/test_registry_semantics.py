"""The report is a snapshot with distinct compile ids and named sources; the pattern registry refuses duplicates,
unknown names and bad priorities; options that cannot work are OptionErrors, raised as themselves."""
import os
import textwrap

import pytest
import torch

import mojo_compile
from mojo_compile import patterns
from conftest import DEVICE, run_in_fresh_process
from test_rms_norm import Llama

EAGER_TORCH = {"inner_compiler": "eager", "target": "torch"}
mojo = torch.ops.mojo


def compiled(module, **options):
    return torch.compile(module, backend="mojo", options={**EAGER_TORCH, **options})


def x_bf16(n=32):
    return torch.randn(4, n, device=DEVICE, dtype=torch.bfloat16)


@pytest.fixture
def registry():
    """Restore the registry (contents and order) after a test that changes it. The built-ins load first: a
    snapshot taken before they had loaded would restore an empty registry, and their modules register only once,
    on import (a worker that ran this test first then fused nothing)."""
    patterns.load_fusions()
    saved, builtin = dict(patterns._PATTERNS), set(patterns._BUILTIN_NAMES)
    yield
    for name, pattern in patterns._PATTERNS.items():
        if saved.get(name) is not pattern:  # its traces must not make a later registration look like a duplicate
            patterns._forget_traces(pattern)
    patterns._PATTERNS.clear()
    patterns._PATTERNS.update(saved)
    patterns._BUILTIN_NAMES.clear()
    patterns._BUILTIN_NAMES.update(builtin)


# ------------------------------------------------------------------------------------------------------ report
def test_last_report_is_a_snapshot():
    norm = Llama(32).to(DEVICE, torch.bfloat16)
    compiled(norm)(x_bf16())
    first = mojo_compile.last_report()
    assert first.counts() == {"mojo.rms_norm": 1}
    first.graphs[0].sites.clear()  # changing the snapshot leaves the record alone
    first.graphs.clear()
    assert mojo_compile.last_report().counts() == {"mojo.rms_norm": 1}

    first = mojo_compile.last_report()
    compiled(Llama(64).to(DEVICE, torch.bfloat16))(x_bf16(64))  # a later compile
    assert len(first.graphs) == 1 and len(mojo_compile.last_report().graphs) == 2
    mojo_compile.reset_report()
    assert len(first.graphs) == 1 and first.counts() == {"mojo.rms_norm": 1}
    assert mojo_compile.last_report().graphs == []


def test_compile_ids_stay_distinct_after_dynamo_reset(tmp_path):
    norm = Llama(32).to(DEVICE, torch.bfloat16)
    compiled(norm, dump_dir=str(tmp_path))(x_bf16())
    torch._dynamo.reset()  # Dynamo numbers frames from 0 again
    compiled(norm, dump_dir=str(tmp_path))(x_bf16())
    ids = [g.compile_id for g in mojo_compile.last_report().graphs]
    assert ids == ["0/0", "0/0#2"]
    assert mojo_compile.last_report().table().count("graph 0/0") == 2
    # after reset_report() the ids start over, but this process's dumps are never overwritten
    mojo_compile.reset_report()
    torch._dynamo.reset()
    compiled(norm, dump_dir=str(tmp_path))(x_bf16())
    assert [g.compile_id for g in mojo_compile.last_report().graphs] == ["0/0"]
    stems = sorted({name.split(".")[0] for name in os.listdir(tmp_path)})
    assert stems == ["graph_0_0", "graph_0_0-2", "graph_0_0-3"], stems
    assert "graph 0/0#2" in (tmp_path / "graph_0_0-2.report.txt").read_text()


def test_root_module_sites_are_named():
    class MyNorm(Llama):  # inherits Llama.forward: named after the module compiled
        pass

    compiled(MyNorm(32).to(DEVICE, torch.bfloat16))(x_bf16())
    report = mojo_compile.last_report()
    assert [s.source for s in report.sites] == ["<root: MyNorm>"]
    table = report.table()
    assert "<root: MyNorm>" in table and "?" not in table

    def llama_norm(x, w):
        h = x.float()
        return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)

    mojo_compile.reset_report()
    compiled(llama_norm)(x_bf16(), torch.randn(32, device=DEVICE, dtype=torch.bfloat16))
    assert [s.source for s in mojo_compile.last_report().sites] == ["<root: llama_norm>"]


# ---------------------------------------------------------------------------------------------------- registry
def _half_norm(scale):
    def search(x, eps):
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * 0.5).to(x.dtype)

    def replace(x, eps):
        return (mojo.rms_norm(x, None, eps, 0.0, "output")[0].float() * scale).to(x.dtype)

    return search, replace


def test_duplicate_names_need_replace(registry):
    search, replace = _half_norm(0.5)
    examples = [(torch.randn(2, 8, dtype=torch.bfloat16),)]
    mojo_compile.register_pattern("user.half_norm", search, replace, examples, scalars={"eps": 1.2345e-3},
                                  priority=100)
    with pytest.raises(mojo_compile.PatternError, match="'user.half_norm' is already registered.*replace=True"):
        mojo_compile.register_pattern("user.half_norm", search, replace, examples, scalars={"eps": 1.2345e-3})
    with pytest.raises(mojo_compile.PatternError, match=r"'rms_norm.llama' is already registered \(built-in\)"):
        mojo_compile.register_pattern("rms_norm.llama", search, replace, examples, scalars={"eps": 1.2345e-3})
    # replace=True: the same search with another replacement takes over (not skipped as a duplicate trace)
    search2, replace2 = _half_norm(0.25)
    mojo_compile.register_pattern("user.half_norm", search2, replace2, examples, scalars={"eps": 1.2345e-3},
                                  priority=100, replace=True)
    x = torch.randn(3, 64, device=DEVICE, dtype=torch.bfloat16)
    out = compiled(lambda x: search(x, 1e-5))(x)
    assert [s.pattern for s in mojo_compile.last_report().sites] == ["user.half_norm"]
    torch.testing.assert_close(out, search(x, 1e-5) * 0.5)  # the new replacement's scale 0.25 (vs 0.5)


def test_a_tensor_parameter_matches_only_a_tensor(registry):
    """Inductor's KeywordArg matches any value: a pattern traced with a tensor weight would match a product with a
    Python float (or a layer norm a call whose bias is None) and hand the replacement that value. Only a graph tensor
    binds a tensor parameter; the float product stays eager's (here the replacement would make it 3x)."""
    def search(x, w, eps):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    def replace(x, w, eps):
        return mojo.rms_norm(x, None, eps, 0.0, "output")[0] * w * 3

    mojo_compile.register_pattern("user.scaled_norm", search, replace, [(torch.randn(4, 8), torch.randn(8))],
                                  scalars={"eps": 1.2345e-3}, priority=100)
    x, w = torch.randn(3, 8, device=DEVICE), torch.randn(8, device=DEVICE)
    out = compiled(lambda x: search(x, 2.0, 1e-5))(x)
    assert [s.pattern for s in mojo_compile.last_report().sites] == ["rms_norm.unweighted"]  # the norm inside only
    torch.testing.assert_close(out, search(x, 2.0, 1e-5))
    torch._dynamo.reset()
    mojo_compile.reset_report()
    out = compiled(lambda x, w: search(x, w, 1e-5))(x, w)
    assert [s.pattern for s in mojo_compile.last_report().sites] == ["user.scaled_norm"]
    torch.testing.assert_close(out, search(x, w, 1e-5) * 3)


def test_a_tensor_parameter_left_out_of_the_match_counts_as_none():
    """torch 2.11 hands extra_check the match of a re-trace, where a None bound to a parameter is a constant and the
    parameter is missing from match.kwargs: that is a None, refused unless the pattern declares it optional."""
    from types import SimpleNamespace

    from mojo_compile.patterns import _not_a_tensor

    pattern = SimpleNamespace(tensor_params=["x", "weight"], optional=())
    node = torch.fx.Graph().placeholder("x")
    assert "weight, traced as a tensor, is left out of the match" in _not_a_tensor(pattern, SimpleNamespace(
        kwargs={"x": node}))
    assert "weight, traced as a tensor, is bound to 2.0" in _not_a_tensor(pattern, SimpleNamespace(
        kwargs={"x": node, "weight": 2.0}))
    assert _not_a_tensor(pattern, SimpleNamespace(kwargs={"x": node, "weight": node})) is None
    pattern.optional = ("weight",)
    assert _not_a_tensor(pattern, SimpleNamespace(kwargs={"x": node})) is None
    assert _not_a_tensor(pattern, SimpleNamespace(kwargs={"x": node, "weight": None})) is None
    assert "bound to 2.0" in _not_a_tensor(pattern, SimpleNamespace(kwargs={"x": node, "weight": 2.0}))


def test_unregister(registry):
    with pytest.raises(mojo_compile.PatternError, match=r"no pattern named 'rms_norm.lama'.*'rms_norm.llama'"):
        mojo_compile.unregister_pattern("rms_norm.lama")
    removed = mojo_compile.unregister_pattern("rms_norm.llama")
    assert removed.name == "rms_norm.llama"
    assert "rms_norm.llama" not in {p.name for p in mojo_compile.registered_patterns()}
    compiled(Llama(32).to(DEVICE, torch.bfloat16))(x_bf16())
    assert "rms_norm.llama" not in [s.pattern for s in mojo_compile.last_report().sites]


FRESH_PROCESS = {
    "register": """
        try:
            mojo_compile.register_pattern("rms_norm.llama", lambda x: x * 2, lambda x: x * 3, (torch.randn(2),))
            raise SystemExit("no error for a built-in's name")
        except mojo_compile.PatternError as e:
            assert "already registered (built-in)" in str(e), e
    """,
    "unregister": """
        mojo_compile.unregister_pattern("rms_norm.llama")
        def norm(x, w):
            h = x.float()
            return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
        torch.compile(norm, backend="mojo", options={"inner_compiler": "eager", "target": "torch"})(
            torch.randn(4, 32, dtype=torch.bfloat16), torch.randn(32, dtype=torch.bfloat16))
        assert "rms_norm.llama" not in {p.name for p in mojo_compile.registered_patterns()}
        assert "rms_norm.llama" not in [s.pattern for s in mojo_compile.last_report().sites]
    """,
}


@pytest.mark.parametrize("case", sorted(FRESH_PROCESS))
def test_builtin_names_before_the_builtins_load(case):
    """In a fresh process nothing has loaded the built-ins yet: a built-in's name is taken all the same, and
    unregistering a built-in lasts through the first compile (which loads the built-ins)."""
    code = "import torch, mojo_compile\n" \
           "from mojo_compile import patterns\n" \
           "assert patterns._load_builtins.cache_info().currsize == 0, 'built-ins already loaded'\n" \
           + textwrap.dedent(FRESH_PROCESS[case]) + "print('ok')\n"
    assert run_in_fresh_process(code).strip().endswith("ok")


@pytest.mark.parametrize("priority", [True, 1.5, "1", 1001, -1001, None])
def test_priority_is_validated(priority, registry):
    with pytest.raises(mojo_compile.PatternError, match="priority must be an int from -1000 to 1000"):
        mojo_compile.register_pattern("user.p", lambda x: x * 2, lambda x: x * 3, (torch.randn(2),),
                                      priority=priority, lazy=True)
    assert mojo_compile.register_pattern("user.p", lambda x: x * 2, lambda x: x * 3, (torch.randn(2),),
                                         priority=-1000, lazy=True).priority == -1000


# ----------------------------------------------------------------------------------------------------- options
def test_disable_entries_must_match_something(monkeypatch):
    with pytest.raises(mojo_compile.OptionError, match=r"disable entry 'rms_nrom' .* did you mean 'rms_norm'"):
        mojo_compile.Options.parse(options={"disable": ["rms_nrom"]})
    with pytest.raises(mojo_compile.OptionError, match=r"'rms_norm.gema\*' .* did you mean 'rms_norm.gemma"):
        mojo_compile.Options.parse(options={"disable": "rms_norm.gema*"})
    monkeypatch.setenv("MOJO_DISABLE", "rms_norm,no_such_family")
    with pytest.raises(mojo_compile.OptionError, match="'no_such_family'"):
        mojo_compile.Options.parse()
    monkeypatch.delenv("MOJO_DISABLE")
    ok = mojo_compile.Options.parse(options={"disable": ["add_rms_norm", "rms_norm.gemma*", "attention.sdpa.*"]})
    assert ok.disable == ("add_rms_norm", "rms_norm.gemma*", "attention.sdpa.*")
    with pytest.raises(mojo_compile.OptionError, match="did you mean 'gated_act'"):  # through torch.compile too
        compiled(Llama(32).to(DEVICE, torch.bfloat16), disable=["gated_atc"])(x_bf16())


def test_bad_dump_dir_is_an_option_error(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(mojo_compile.OptionError, match="exists and is not a directory"):
        mojo_compile.Options.parse(options={"dump_dir": str(a_file)})
    with pytest.raises(mojo_compile.OptionError, match="cannot be created"):
        mojo_compile.Options.parse(options={"dump_dir": str(a_file / "sub" / "dir")})
    assert mojo_compile.Options.parse(options={"dump_dir": str(tmp_path / "new" / "dir")}).dump_dir
    assert not (tmp_path / "new").exists()  # created at the first dump, not when parsed


def test_option_errors_reach_the_caller_as_themselves():
    def fn(x):
        return x.sin() + 1

    with pytest.raises(mojo_compile.OptionError) as info:
        torch.compile(fn, backend="mojo", options={"target": "nope"})(torch.randn(3, device=DEVICE))
    message = str(info.value)
    assert message.startswith("unknown mojo target 'nope'")
    for noise in ("report", "PyTorch", "TORCHDYNAMO_VERBOSE", "backend='mojo' raised", "from user code"):
        assert noise not in message, message
    assert isinstance(info.value, ValueError)


# Two user patterns whose searches trace to the same graph, each replacing the site by an equal value plus its own
# offset (written without the search's spelling, so that one replacement is not matched again by the other).
# Run in a fresh process: the state at stake is process-wide (Inductor's record of traced graphs, Dynamo's cache).
SAME_SEARCH = """
import torch, torch.nn.functional as F, mojo_compile
OPT = {"inner_compiler": "eager", "target": "torch"}
def search(x):
    return torch.sigmoid(x) * 3.0
def plus(offset):
    return lambda x: 3.0 / (1.0 + torch.exp(-x)) + offset
def offset(fn=search, **options):
    x = torch.randn(3, 8)
    out = torch.compile(fn, backend="mojo", options={**OPT, **options})(x)
    return round((out - fn(x)).mean().item())
"""


def _run_fresh(body: str) -> str:
    """The last word `body` prints, run in a fresh process."""
    return run_in_fresh_process(body).split()[-1]


SAME_SEARCH_CASES = {
    # the higher priority runs first, whichever registered first
    "priority": ("userA", "userB", 50, "", "200"),
    "priority, registered the other way round": ("userB", "userA", -50, "", "200"),
    # the other one still runs when the first one is disabled or removed
    "disabled": ("userA", "userB", 50, "print(offset(disable=['userB']))", "100"),
    "first disabled": ("userA", "userB", 0, "print(offset(disable=['userA']))", "200"),
    "first unregistered": ("userA", "userB", 0, "mojo_compile.unregister_pattern('userA')\n", "200"),
}


@pytest.mark.parametrize("case", sorted(SAME_SEARCH_CASES))
def test_patterns_with_the_same_search_each_run(case):
    """A pattern whose search traces like another's is its own pattern: priority, disable and unregister_pattern
    apply to it as to any (it was skipped as the other's duplicate: never run, whatever its priority)."""
    first, second, priority, then, expected = SAME_SEARCH_CASES[case]
    offsets = {"userA": 100, "userB": 200}
    body = SAME_SEARCH + f"""
mojo_compile.register_pattern({first!r}, search, plus({offsets[first]}), [(torch.randn(4, 8),)])
mojo_compile.register_pattern({second!r}, search, plus({offsets[second]}), [(torch.randn(4, 8),)],
                              priority={priority})
""" + (then if then.startswith("print") else then + "print(offset())")
    assert _run_fresh(body) == expected


@pytest.mark.parametrize("compile_first", [False, True])
def test_a_user_pattern_over_a_builtins_search_follows_its_priority(compile_first):
    """A user's pattern with a built-in's search and a higher priority wins, whether or not an earlier compile
    had the built-in traced (it did not when no compile ran first, and lost when one had)."""
    body = SAME_SEARCH + f"""
def swiglu(gate, up):
    return F.silu(gate) * up
def own(gate, up):
    return gate / (1.0 + torch.exp(-gate)) * up + 100
args = (torch.randn(2, 5, 64, dtype=torch.bfloat16), torch.randn(2, 5, 64, dtype=torch.bfloat16))
if {compile_first}:
    torch.compile(swiglu, backend="mojo", options=OPT)(*args)
mojo_compile.register_pattern("user.swiglu", swiglu, own,
                              [(torch.randn(4, 64, dtype=torch.bfloat16), torch.randn(4, 64, dtype=torch.bfloat16))],
                              priority=100)
out = torch.compile(swiglu, backend="mojo", options=OPT)(*args)
print(round((out.float() - swiglu(*args).float()).mean().item()))
"""
    assert _run_fresh(body) == "100"


REGISTRY_CHANGES = {
    # a pattern removed after a compile does not run in a new compile of the same function, nor on the next call
    # of the function compiled before
    "unregistered": ("mojo_compile.register_pattern('user.sig3', search, plus(100), [(torch.randn(4, 8),)])",
                     "mojo_compile.unregister_pattern('user.sig3')", "0"),
    "registered": ("", "mojo_compile.register_pattern('user.sig3', search, plus(100), [(torch.randn(4, 8),)])",
                   "100"),
}


@pytest.mark.parametrize("case", sorted(REGISTRY_CHANGES))
@pytest.mark.parametrize("recompile", [True, False])
def test_a_registry_change_reaches_code_compiled_before(case, recompile):
    """Dynamo caches compiled code per function, guarded on the backend and its options, not on our registry: a
    change after a compile resets Dynamo, so the next call compiles under the registry as it is now."""
    before, change, expected = REGISTRY_CHANGES[case]
    call = "torch.compile(search, backend='mojo', options=OPT)(x)" if recompile else "compiled(x)"
    body = SAME_SEARCH + f"""
{before}
x = torch.randn(3, 8)
compiled = torch.compile(search, backend="mojo", options=OPT)
compiled(x)
{change}
print(round(({call} - search(x)).mean().item()))
"""
    assert _run_fresh(body) == expected


# For the user ops of the tests below: the backward of 3 sigmoid(x).
USER_OPS = """
import threading
from mojo_compile import patterns as P
def sig3_backward(ctx, g):
    s = torch.sigmoid(ctx.x)
    return g * 3.0 * s * (1 - s), None
"""


def test_a_registry_change_on_another_thread_during_a_compile_reaches_code_compiled_before():
    """While thread T runs a mojo compile (held open by a graph pass), the main thread registers a pattern for a
    function compiled before: that change is after the function's compile, so its code is dropped. (The count of
    running compiles was process-wide: T's compile made the registration look like part of a running compile.)"""
    body = SAME_SEARCH + USER_OPS + textwrap.dedent("""
    started, go = threading.Event(), threading.Event()
    def waiter(gm):  # holds T's compile open until the main thread has registered
        if threading.current_thread().name == "T":
            started.set()
            go.wait(5)  # (with a thread-aware fix the reset waits on Dynamo's compile lock: a timeout, no deadlock)
        return []
    mojo_compile.register_graph_pass("user.waiter", waiter)
    x = torch.randn(3, 8)
    compiled = torch.compile(search, backend="mojo", options=OPT)
    compiled(x)
    other = torch.compile(lambda x: torch.tanh(x) + 1, backend="mojo", options=OPT)
    t = threading.Thread(target=lambda: other(x), name="T")
    t.start()
    started.wait(60)
    mojo_compile.register_pattern("user.sig3", search, plus(100), [(torch.randn(4, 8),)])
    go.set()
    t.join()
    print(round((compiled(x) - search(x)).mean().item()))
""")
    assert _run_fresh(body) == "100"


def test_an_op_for_one_device_with_an_autograd_formula_counts_as_differentiable():
    """A user's Triton-style op (custom_op for "cuda" only, with a fake and a backward) registered with CPU example
    inputs as the README does: the replacement is traced on fake inputs, so the op is found and its formula seen
    (a trace on the real CPU inputs raised, and every training site was refused)."""
    body = SAME_SEARCH + USER_OPS + textwrap.dedent("""
    @torch.library.custom_op("mojo::user_cuda_only_sig3", mutates_args=(), device_types="cuda")
    def cuda_only(x: torch.Tensor, target: str = "torch") -> torch.Tensor:
        return torch.sigmoid(x) * 3.0
    cuda_only.register_fake(lambda x, target="torch": torch.empty_like(x))
    cuda_only.register_autograd(sig3_backward, setup_context=lambda ctx, inputs, output: setattr(ctx, "x", inputs[0]))
    pattern = mojo_compile.register_pattern("user.sig3", search, lambda x: cuda_only(x), [(torch.randn(4, 8),)])
    print(len(P._ops_without_backward(pattern)))
""")
    assert _run_fresh(body) == "0"


def test_an_op_with_a_per_device_autograd_kernel_is_fused_for_training():
    """An op whose autograd kernel is registered for AutogradCPU (a per-device key, not the Autograd alias) fuses
    where an input needs a gradient, and the weight's gradient is eager's."""
    body = SAME_SEARCH + USER_OPS + textwrap.dedent("""
    lib = torch.library.Library("mojo", "FRAGMENT")
    lib.define("user_autograd_cpu_sig3(Tensor x, str target='torch') -> Tensor")
    class Sig3(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.x = x
            with torch._C._AutoDispatchBelowAutograd():
                return torch.ops.mojo.user_autograd_cpu_sig3(x)
        @staticmethod
        def backward(ctx, g):
            return sig3_backward(ctx, g)[0]
    lib.impl("user_autograd_cpu_sig3", lambda x, target="torch": torch.sigmoid(x) * 3.0, "CPU")
    lib.impl("user_autograd_cpu_sig3", lambda x, target="torch": torch.empty_like(x), "Meta")
    lib.impl("user_autograd_cpu_sig3", lambda x, target="torch": Sig3.apply(x), "AutogradCPU")
    mojo_compile.register_pattern("user.sig3", search, lambda x: torch.ops.mojo.user_autograd_cpu_sig3(x),
                                  [(torch.randn(4, 8),)])
    lin = torch.nn.Linear(8, 8)
    x = torch.randn(3, 4, 8)
    step = lambda x: search(lin(x)).sum()
    out = torch.compile(step, backend="mojo", options=OPT)(x)
    out.backward()
    fused_grad = lin.weight.grad.clone()
    lin.zero_grad()
    step(x).backward()
    torch.testing.assert_close(fused_grad, lin.weight.grad)
    print(",".join(s.pattern for s in mojo_compile.last_report().sites) or "none")
""")
    assert _run_fresh(body) == "user.sig3"
