"""Review s23 findings (session 88f64b9..HEAD): each test fails on HEAD and passes once the finding is fixed.

Every scenario runs in a fresh process: the state at stake (the pattern registry, Dynamo's caches, the custom ops
defined for the scenario, the compile counter of patterns.compiling) is process-wide."""
import conftest  # before mojo_compile, as every tests/test_*.py
del conftest  # (imported for its set-up only)
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PRELUDE = """
import threading
import torch, mojo_compile
from mojo_compile import patterns as P
OPT = {"inner_compiler": "eager", "target": "torch"}
def search(x):
    return torch.sigmoid(x) * 3.0
def plus(offset):
    return lambda x: 3.0 / (1.0 + torch.exp(-x)) + offset
def sig3_backward(ctx, g):
    s = torch.sigmoid(ctx.x)
    return g * 3.0 * s * (1 - s), None
"""


def _run_fresh(body: str) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "tests"), ROOT]), TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], capture_output=True, text=True,
                          timeout=600, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()[-1]


def test_a_pattern_registered_on_another_thread_during_a_compile_reaches_code_compiled_before():
    """Finding 1. `search` is compiled (a compile done); while thread T compiles another function with the mojo
    backend, the main thread registers a pattern for `search`. The registration is after the compile of `search`,
    so that compiled code must be dropped (docs: a registry change after a compile resets Dynamo). HEAD skips the
    reset because _COMPILES["running"] is process-wide: T's compile counts as 'this registration is part of a
    running compile', and `compiled(x)` keeps running the code made before the pattern existed (offset 0)."""
    body = """
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
    """
    assert _run_fresh(body) == "100"


def test_a_device_only_custom_op_with_an_autograd_formula_is_not_refused_for_training():
    """Finding 2. A user's Triton-style op: custom_op(device_types="cuda") with register_fake and register_autograd,
    the pattern registered with CPU example inputs as the README shows. _ops_without_backward traces the
    replacement with make_fx on the *real* example inputs: the op has no CPU kernel, the trace raises
    NotImplementedError, and the op is reported as '(it does not trace alone)': every site whose inputs need a
    gradient is refused on the GPU, though the op has a backward. Expected: no op without a backward."""
    body = """
    @torch.library.custom_op("mojo::s23_cuda_only", mutates_args=(), device_types="cuda")
    def cuda_only(x: torch.Tensor, target: str = "torch") -> torch.Tensor:
        return torch.sigmoid(x) * 3.0
    cuda_only.register_fake(lambda x, target="torch": torch.empty_like(x))
    cuda_only.register_autograd(sig3_backward, setup_context=lambda ctx, inputs, output: setattr(ctx, "x", inputs[0]))
    pattern = mojo_compile.register_pattern("user.sig3", search, lambda x: cuda_only(x), [(torch.randn(4, 8),)])
    print(len(P._ops_without_backward(pattern)))
    """
    assert _run_fresh(body) == "0"


def test_an_op_with_a_per_backend_autograd_kernel_is_fused_for_training():
    """Finding 3. An op defined with torch.library.Library whose autograd kernel is registered for AutogradCPU (the
    per-backend key; AutogradCUDA likewise) differentiates in eager, and the fused graph's backward is eager's
    (checked with _no_backward bypassed). HEAD looks only at the alias keys Autograd and CompositeImplicitAutograd,
    reports 'no autograd formula', and leaves the site unfused."""
    body = """
    lib = torch.library.Library("mojo", "FRAGMENT")
    lib.define("s23_sig3(Tensor x, str target='torch') -> Tensor")
    class Sig3(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.x = x
            with torch._C._AutoDispatchBelowAutograd():
                return torch.ops.mojo.s23_sig3(x)
        @staticmethod
        def backward(ctx, g):
            return sig3_backward(ctx, g)[0]
    lib.impl("s23_sig3", lambda x, target="torch": torch.sigmoid(x) * 3.0, "CPU")
    lib.impl("s23_sig3", lambda x, target="torch": torch.empty_like(x), "Meta")
    lib.impl("s23_sig3", lambda x, target="torch": Sig3.apply(x), "AutogradCPU")
    mojo_compile.register_pattern("user.sig3", search, lambda x: torch.ops.mojo.s23_sig3(x), [(torch.randn(4, 8),)])
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
    """
    assert _run_fresh(body) == "user.sig3"


def test_a_site_computed_under_no_grad_inside_a_training_step_is_fused():
    """Finding 4 (low: a missed fusion, eager's numbers). A teacher's forward under torch.no_grad() inside a
    compiled training step: its output needs no gradient, so a user replacement calling an inference-only op is
    what eager allows (the test_api case 'no formula, inference' fuses the same site under no_grad outside). HEAD's
    _no_backward asks needs_grad, a superset that ignores grad mode (the teacher's weight requires grad), and
    refuses the site."""
    body = """
    @torch.library.custom_op("mojo::s23_inference", mutates_args=())
    def inference_only(x: torch.Tensor, target: str = "torch") -> torch.Tensor:
        return torch.sigmoid(x) * 3.0
    inference_only.register_fake(lambda x, target="torch": torch.empty_like(x))
    mojo_compile.register_pattern("user.sig3", search, lambda x: inference_only(x), [(torch.randn(4, 8),)])
    teacher, student = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
    def step(x):
        with torch.no_grad():
            t = search(teacher(x))
        return ((student(x) - t) ** 2).sum()
    x = torch.randn(3, 4, 8)
    out = torch.compile(step, backend="mojo", options=OPT)(x)
    out.backward()
    got = student.weight.grad.clone()
    student.zero_grad()
    step(x).backward()
    torch.testing.assert_close(got, student.weight.grad)
    print(",".join(s.pattern for s in mojo_compile.last_report().sites) or "none")
    """
    assert _run_fresh(body) == "user.sig3"


def test_verify_grad_passes_a_correct_rms_norm_on_inputs_drawn_after_manual_seed_0():
    """Finding 5 (verify false alarm, new with the elementwise rule). `torch.manual_seed(0); x = torch.randn(256,
    512)`; debug.verify(nn.RMSNorm(512), x, grad=True) under target 'torch' (the reference lowering, correct by
    construction; 'ttx' likewise). _grad_checks draws grads_out from a CPU Generator seeded 0: the same stream as
    the user's seed-0 randn, so grads_out == x and the input gradient of a normalisation (its projection orthogonal
    to x) is pure rounding noise. The normwise rule passes (fused err 0.91 <= 2 x eager's), the elementwise rule
    fails at 3.3x: eager's own error at one element is a single noise sample, so the allowance at an element where
    eager is exact by chance is ~2 sigma, while the largest of 131k ordinary fused samples is ~4.8 sigma. (Seed 1
    passes; a gradient whose errors are noise-level above the floor fails the same way whatever the seed.)"""
    body = """
    from mojo_compile import debug
    torch.manual_seed(0)
    x = torch.randn(256, 512, requires_grad=True)
    result = debug.verify(torch.nn.RMSNorm(512), x, grad=True, options=OPT)
    print(",".join(f"{c.what}:{c.reason()}" for c in result.failures).replace(" ", "_") or "ok")
    """
    assert _run_fresh(body) == "ok"
