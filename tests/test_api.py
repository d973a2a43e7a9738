"""The user-facing surface: options and their errors, register_pattern, the report, the CLI, the entry point."""
import ast
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import mojo_compile
from conftest import DEVICE

mojo = torch.ops.mojo


def llama_norm(x, w):
    h = x.float()
    return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)


def run_compiled(fn, *args, **compile_kwargs):
    return torch.compile(fn, backend="mojo", **compile_kwargs)(*args)


def xw(n=32):
    return torch.randn(4, n, device=DEVICE, dtype=torch.bfloat16), torch.randn(n, device=DEVICE, dtype=torch.bfloat16)


# ---------------------------------------------------------------------------------------------------- options
@pytest.mark.parametrize("options,message", [
    ({"target": "tpu"}, "unknown mojo target 'tpu'"),
    ({"inner_compiler": "tvm"}, "unknown inner_compiler 'tvm'"),
    ({"no_such_option": 1}, "unknown option 'no_such_option'"),
    ({"inner_compiler": "eager", "max_autotune": True}, "takes no Inductor config"),
])
def test_bad_options_are_clear_errors(options, message):
    with pytest.raises(Exception, match=message):
        run_compiled(llama_norm, *xw(), options=options)


def test_torch_npu_without_torch_npu_is_a_clear_error():
    if importlib.util.find_spec("torch_npu") is not None:
        pytest.skip("torch_npu is installed")
    with pytest.raises(Exception, match="target 'torch_npu' was requested .* unavailable: No module named 'torch_npu'"):
        run_compiled(llama_norm, *xw(), options={"target": "torch_npu", "inner_compiler": "eager"})


def test_env_vars(monkeypatch):
    monkeypatch.setenv("MOJO_BACKEND", "torch")
    monkeypatch.setenv("MOJO_INNER", "eager")
    monkeypatch.setenv("MOJO_DISABLE", "rms_norm")
    run_compiled(llama_norm, *xw())
    graph = mojo_compile.last_report().graphs[0]
    assert (graph.target, graph.inner_compiler, graph.counts()) == ("torch", "eager", {})


def test_mode_and_extra_kwargs_are_accepted():
    """HF's CompileConfig passes mode=; Inductor config keys pass through."""
    options = mojo_compile.Options.parse(mode="max-autotune-no-cudagraphs", options={"target": "torch"})
    assert options.inductor_config.get("max_autotune") is True
    assert mojo_compile.Options.parse(mode="reduce-overhead").inductor_config == {"triton.cudagraphs": True}
    with pytest.raises(mojo_compile.OptionError, match="unknown mode"):
        mojo_compile.Options.parse(mode="fastest")


def test_dump_dir(tmp_path):
    run_compiled(llama_norm, *xw(), options={"inner_compiler": "eager", "dump_dir": str(tmp_path)})
    names = sorted(os.listdir(tmp_path))
    assert names == ["graph_0_0.dynamo.py", "graph_0_0.mojo.py", "graph_0_0.report.txt"]
    assert "torch.ops.mojo.rms_norm" in (tmp_path / "graph_0_0.mojo.py").read_text()


# ---------------------------------------------------------------------------------------------- user patterns
@pytest.mark.parametrize("priority", [{}, {"priority": 100}], ids=["as in the README", "priority 100"])
def test_register_pattern_user_fusion(priority):
    """A user's own spelling (scaled by a constant after the norm) becomes a Mojo op plus the scale. As the README
    registers it (no priority), the built-in patterns try the bf16 site first: rms_norm.gemma3n's re-trace with
    the constant bound to its weight raised AttributeError, a compile failure (patterns._Tracer.retrace)."""
    def search(x, eps):
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * 0.5).to(x.dtype)

    def replace(x, eps):
        return (mojo.rms_norm(x, None, eps, 0.0, "output")[0].float() * 0.5).to(x.dtype)

    examples = [(torch.randn(2, 8, dtype=torch.bfloat16),), (torch.randn(2, 8),)]
    mojo_compile.register_pattern("user.half_norm", search, replace, examples, scalars={"eps": 1.2345e-3},
                                  **priority)
    try:
        x = torch.randn(3, 64, device=DEVICE, dtype=torch.bfloat16)
        fn = lambda x: search(x, 1e-5)  # noqa: E731
        out = run_compiled(fn, x, options={"inner_compiler": "eager", "target": "torch"})
        assert [s.pattern for s in mojo_compile.last_report().sites] == ["user.half_norm"]
        assert torch.equal(out, fn(x))
    finally:
        mojo_compile.unregister_pattern("user.half_norm")


@torch.library.custom_op("mojo::test_api_sig3_inference", mutates_args=())
def sig3_inference(x: torch.Tensor, target: str = "torch") -> torch.Tensor:
    """A user's op registered for inference only: no autograd formula. (A Mojo op's last argument names the
    target its site was lowered for.)"""
    return torch.sigmoid(x) * 3.0


sig3_inference.register_fake(lambda x, target="torch": torch.empty_like(x))


@torch.library.custom_op("mojo::test_api_sig3_trained", mutates_args=())
def sig3_trained(x: torch.Tensor, target: str = "torch") -> torch.Tensor:
    return torch.sigmoid(x) * 3.0


sig3_trained.register_fake(lambda x, target="torch": torch.empty_like(x))
sig3_trained.register_autograd(lambda ctx, g: (g * 3.0 * torch.sigmoid(ctx.x) * (1 - torch.sigmoid(ctx.x)), None),
                               setup_context=lambda ctx, inputs, output: setattr(ctx, "x", inputs[0]))


@pytest.mark.parametrize("op,grad,fused", [(sig3_inference, True, False), (sig3_inference, False, True),
                                           (sig3_trained, True, True)], ids=["no formula, training",
                                                                             "no formula, inference", "formula"])
def test_a_user_op_without_autograd_is_not_fused_where_a_gradient_is_wanted(op, grad, fused):
    """A user's replacement calling an op with no autograd formula leaves a site whose inputs need a gradient to
    eager (the backward raised where eager computes it); without a gradient, or with a formula, it fuses; the
    weight's gradient is eager's (the same fp32 arithmetic, to rounding)."""
    def search(x):
        return torch.sigmoid(x) * 3.0

    mojo_compile.register_pattern("user.sig3", search, lambda x: op(x), [(torch.randn(4, 8),)])
    try:
        lin = torch.nn.Linear(8, 8)
        x = torch.randn(3, 4, 8)
        step = lambda x: search(lin(x)).sum()  # noqa: E731
        with torch.set_grad_enabled(grad):
            out = torch.compile(step, backend="mojo", options={"inner_compiler": "eager", "target": "torch"})(x)
        assert [s.pattern for s in mojo_compile.last_report().sites] == (["user.sig3"] if fused else [])
        with torch.set_grad_enabled(grad):
            expected = step(x)
        torch.testing.assert_close(out, expected)
        if grad:
            out.backward()
            fused_grad = lin.weight.grad.clone()
            lin.zero_grad()
            expected.backward()
            torch.testing.assert_close(fused_grad, lin.weight.grad)
    finally:
        mojo_compile.unregister_pattern("user.sig3")


def test_a_replacement_that_calls_an_op_without_autograd_for_one_dtype_only_is_not_fused_for_training():
    """The replacement calls the inference-only op for fp32 alone (its kernel's dtype, say) and the formula-carrying
    one otherwise: the fp32 site, whose input needs a gradient, stays eager's (each example input set is traced,
    not only the first, a bf16 one here); its gradient is eager's."""
    def search(x):
        return torch.sigmoid(x) * 3.0

    def replace(x):
        return sig3_inference(x) if x.dtype == torch.float32 else sig3_trained(x)

    mojo_compile.register_pattern("user.sig3", search, replace,
                                  [(torch.randn(4, 8, dtype=torch.bfloat16),), (torch.randn(4, 8),)])
    try:
        lin = torch.nn.Linear(8, 8)
        x = torch.randn(3, 4, 8)
        step = lambda x: search(lin(x)).sum()  # noqa: E731
        out = torch.compile(step, backend="mojo", options={"inner_compiler": "eager", "target": "torch"})(x)
        assert [s.pattern for s in mojo_compile.last_report().sites] == []
        out.backward()
        fused_grad = lin.weight.grad.clone()
        lin.zero_grad()
        step(x).backward()
        torch.testing.assert_close(fused_grad, lin.weight.grad)
    finally:
        mojo_compile.unregister_pattern("user.sig3")


def test_a_user_pattern_that_reads_a_size_compiles_where_a_gradient_is_wanted():
    """A replacement that slices by a size (`x[..., x.shape[-1] // 2:]`, as rotate_half does) is traced alone to learn
    whether it differentiates, inside the compile: traced in the compile's fake mode, it left the compile guards on
    symbols it had no source for, and the first compile failed where eager runs."""
    def search(x, y):
        return x[..., x.shape[-1] // 2:] * y[..., y.shape[-1] // 2:]

    def replace(x, y):
        return search(x, y).clone()

    mojo_compile.register_pattern("user.half_width_product", search, replace,
                                  [(torch.randn(2, 3, 8), torch.randn(2, 3, 8))])
    try:
        def step(x, y):
            return search(x, y).sum(-1) * 3

        x, y = torch.randn(2, 5, 16, requires_grad=True), torch.randn(2, 5, 16)
        torch._dynamo.reset()
        out = torch.compile(step, backend="mojo", options={"inner_compiler": "eager", "target": "torch"})(x, y)
        out.sum().backward()
        fused_grad, x.grad = x.grad, None
        expected = step(x, y)
        expected.sum().backward()
        assert torch.equal(out, expected) and torch.equal(fused_grad, x.grad)
    finally:
        mojo_compile.unregister_pattern("user.half_width_product")
        torch._dynamo.reset()


def test_register_pattern_errors():
    ok = (torch.randn(2, 8),)
    with pytest.raises(mojo_compile.PatternError, match="must take the same parameters"):
        mojo_compile.register_pattern("bad.sig", lambda x, eps: x, lambda x: x, ok, scalars={"eps": 1e-3})
    with pytest.raises(mojo_compile.PatternError, match=r"scalars / optional \['epsilon'\] are not parameters"):
        mojo_compile.register_pattern("bad.scalar", lambda x, eps: x * eps, lambda x, eps: x * eps, ok,
                                      scalars={"epsilon": 1e-3})
    with pytest.raises(mojo_compile.PatternError, match="failed to trace"):
        mojo_compile.register_pattern("bad.trace", lambda x: x.no_such_method(), lambda x: x, ok)
    with pytest.raises(mojo_compile.PatternError, match="2 example inputs"):
        mojo_compile.register_pattern("bad.inputs", lambda x: x * 2, lambda x: x * 2, (ok[0], ok[0]))
    assert not any(p.name.startswith("bad.") for p in mojo_compile.registered_patterns())


def test_report_json_and_table():
    run_compiled(llama_norm, *xw(), options={"inner_compiler": "eager", "target": "torch"})
    report = mojo_compile.last_report()
    data = json.loads(report.to_json())
    assert data["graphs"][0]["sites"][0]["op"] == "mojo.rms_norm"
    assert "mojo.rms_norm x1" in report.table()


# ----------------------------------------------------------------------------------------------- CLI, install
def _run(args, **kw):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600, **kw)


def test_a_kernel_module_that_does_not_import_leaves_ttx_unavailable(tmp_path):
    """A Triton too old for one of our kernel modules: the ttx target is unavailable with the reason (a GPU's default
    target then falls back to torch with it; asking for ttx by name is the clear OptionError), nothing fails at a
    call (a fresh process: the table loads once)."""
    script = tmp_path / "no_rope_kernels.py"
    script.write_text(textwrap.dedent("""
        import sys, torch
        sys.modules["mojo_compile.kernels.rope"] = None  # its import fails
        import mojo_compile
        from mojo_compile import lowering
        def norm(x, w):
            h = x.float()
            return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
        x, w = torch.randn(4, 32), torch.randn(32)
        try:
            torch.compile(norm, backend="mojo", options={"target": "ttx", "inner_compiler": "eager"})(x, w)
        except Exception as e:
            assert "unavailable" in str(e), e
        out = torch.compile(norm, backend="mojo", options={"inner_compiler": "eager"})(x, w)
        assert torch.allclose(out, norm(x, w)), "wrong numbers"
        print(mojo_compile.last_report().sites[-1].target, "|", lowering.unavailable("ttx"))
    """))
    env = dict(os.environ, PYTHONPATH=os.getcwd(), TRITON_INTERPRET="1")
    done = _run([str(script)], env=env)
    assert done.returncode == 0, done.stderr
    target, reason = done.stdout.strip().splitlines()[-1].split(" | ")
    assert target == "torch" and "mojo_compile.kernels.rope" in reason, done.stdout


def test_cli_explain(tmp_path):
    script = tmp_path / "norm_script.py"
    script.write_text(textwrap.dedent("""
        import sys, torch
        import mojo_compile
        def norm(x, w):
            h = x.float()
            return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
        out = torch.compile(norm, backend="mojo")(torch.randn(4, 32), torch.randn(32))
        print("ran with", sys.argv[1:])
    """))
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    done = _run(["-m", "mojo_compile.cli", "explain", "--inner", "eager", str(script), "--", "--flag", "1"], env=env)
    assert done.returncode == 0, done.stderr
    assert "ran with ['--flag', '1']" in done.stdout
    assert "rms_norm.llama" in done.stdout and "mojo.rms_norm x1" in done.stdout


def test_cli_bad_path():
    done = _run(["-m", "mojo_compile.cli", "explain", "no/such/script.py"])
    assert done.returncode == 2 and "no such script: no/such/script.py" in done.stderr


def _entry_point_installed() -> bool:
    return any(ep.name == "mojo" for ep in importlib.metadata.entry_points(group="torch_dynamo_backends"))


@pytest.mark.skipif(not _entry_point_installed(), reason="package not installed (pip install -e .)")
def test_fresh_process_finds_the_backend_without_importing_it():
    code = textwrap.dedent("""
        import sys, torch
        from transformers import Qwen3Config, Qwen3ForCausalLM
        cfg = Qwen3Config(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                          num_attention_heads=2, num_key_value_heads=1, head_dim=16, pad_token_id=0)
        model = Qwen3ForCausalLM(cfg).eval()
        ids = torch.randint(3, 128, (1, 6))
        assert "mojo_compile" not in sys.modules
        with torch.no_grad():
            out = torch.compile(model, backend="mojo", options={"inner_compiler": "eager"})(input_ids=ids).logits
            # fp32; attention's scores are computed in another order than SDPA's: equal to fp32 rounding
            torch.testing.assert_close(out, model(input_ids=ids).logits, rtol=1e-5, atol=1e-5)
        import mojo_compile
        print(dict(mojo_compile.last_report().counts()))
    """)
    done = _run(["-c", code], cwd="/")
    assert done.returncode == 0, done.stderr[-2000:]
    counts = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert counts == {"mojo.rms_norm": 1, "mojo.add_rms_norm": 2, "mojo.qk_norm_rope": 1, "mojo.gated_act": 1,
                      "mojo.attention": 1}, counts
