"""Under the Inductor inner compiler a Mojo op is not a black box: AOTAutograd decomposes it into its chosen
implementation (lowering.inline_in_inner_compiler), so Inductor launches our Triton kernels from its own code (on a
GPU) or fuses the torch reference with its neighbours. Forward and backward alike; numbers unchanged."""
import pytest
import torch
from torch._inductor.utils import run_and_get_code

import mojo_compile
from conftest import DEVICE


def llama_norm(x, w):
    x32 = x.to(torch.float32)
    y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)
    return w * y.to(x.dtype)


def test_torch_target_is_fused_by_inductor():
    x = torch.randn(4, 8, 64, dtype=torch.bfloat16, requires_grad=True)
    w = (1 + 0.1 * torch.randn(64)).to(torch.bfloat16).requires_grad_()
    compiled = torch.compile(llama_norm, backend="mojo", options={"target": "torch"})

    def step():
        y = compiled(x, w)
        y.backward(torch.ones_like(y))
        return y

    y, codes = run_and_get_code(step)
    assert [s.pattern for s in mojo_compile.last_report().sites] == ["rms_norm.llama"]
    assert codes and not any("mojo" in code for code in codes), "a Mojo op reached Inductor's output as a call"
    y_ref = llama_norm(x.detach(), w.detach())
    # Inductor keeps fused intermediates in fp32 (the normalised value is not rounded to bf16 before the weight
    # multiply), as it does when compiling the spelling itself: at most 1 bf16 ulp, i.e. 2**-7 relative.
    torch.testing.assert_close(y.detach(), y_ref, rtol=2 ** -7, atol=0)


@pytest.mark.skipif(DEVICE != "cuda", reason="Inductor launches user Triton kernels on GPUs only")
def test_ttx_kernels_launched_from_inductor_code():
    x = torch.randn(4, 8, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (1 + 0.1 * torch.randn(4096, device="cuda")).to(torch.bfloat16).requires_grad_()
    compiled = torch.compile(llama_norm, backend="mojo")

    def step():
        y = compiled(x, w)
        y.backward(torch.ones_like(y))
        return y

    y, codes = run_and_get_code(step)
    code = "\n".join(codes)
    assert "_fwd_rows_kernel" in code and "_bwd_rows_kernel" in code
    assert "torch.ops.mojo" not in code
    y_ref = torch.ops.mojo.rms_norm(x.detach(), w.detach(), 1e-6, 0.0, "normed", "ttx")[0]
    assert torch.equal(y.detach(), y_ref)


def test_static_inputs_reach_aot_autograd(monkeypatch):
    """AOTAutograd learns from Dynamo's fields on the graph which inputs are parameters or static addresses (HF's
    StaticCache); CUDA graphs keep those in place and allow their in-place updates. The graph our pipeline hands
    the inner compiler carries them: AOTAutograd finds the same static inputs in it as in Dynamo's own graph."""
    from torch._functorch._aot_autograd.frontend_utils import _try_get_metadata_from_dynamo

    from mojo_compile import backend

    graphs = []
    trace = backend.to_pre_dispatch_aten

    def spy(gm, example_inputs, *rest, **kwargs):
        aten_gm = trace(gm, example_inputs, *rest, **kwargs)
        graphs.append((gm, aten_gm, len(example_inputs)))
        return aten_gm

    monkeypatch.setattr(backend, "to_pre_dispatch_aten", spy)

    class CacheAndNorm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(1 + 0.1 * torch.randn(64))
            self.register_buffer("cache", torch.randn(8, 64))
            torch._dynamo.mark_static_address(self.cache)

        def forward(self, x, position):
            self.cache.index_copy_(0, position, x)  # a StaticCache-style in-place write
            return llama_norm(self.cache, self.weight)

    model = CacheAndNorm()
    x, position = torch.randn(1, 64), torch.tensor([3])
    out = torch.compile(model, backend="mojo", options={"inner_compiler": "eager"})(x, position)
    assert [s.pattern for s in mojo_compile.last_report().sites] == ["rms_norm.llama"]
    assert torch.equal(model.cache[3], x[0])
    torch.testing.assert_close(out, llama_norm(model.cache, model.weight), rtol=0, atol=0)
    (dynamo_gm, aten_gm, n), = graphs
    static = [_try_get_metadata_from_dynamo(g, {}.keys(), n, [])[1] for g in (dynamo_gm, aten_gm)]
    assert len(static[0]) == 2 and static[1] == static[0]  # the parameter and the cache


@pytest.mark.parametrize("user", [{}, {"static_launch_user_defined_triton_kernels": False}])
def test_inductor_starts_inlined_kernels_with_its_static_launcher(monkeypatch, user):
    """Inlined, our kernels are user-defined Triton kernels to Inductor: they are started with its static launcher
    (no C launcher built per kernel signature at the first compile), as Inductor's own are, unless the user's
    Inductor options say otherwise."""
    from torch._inductor import compile_fx as compile_fx_module
    from torch._inductor import config as inductor_config

    patches = []

    def recording_compile_fx(gm, example_inputs, config_patches=None, **kwargs):
        patches.append(dict(config_patches or {}))
        return gm  # run as traced: this test is about the settings Inductor is given

    monkeypatch.setattr(compile_fx_module, "compile_fx", recording_compile_fx)
    x, w = torch.randn(3, 5, 64), 1 + 0.1 * torch.randn(64)
    compiled = torch.compile(llama_norm, backend="mojo", options={"target": "torch", **user})
    torch.testing.assert_close(compiled(x, w), llama_norm(x.double(), w.double()).float(), rtol=1e-5, atol=1e-5)
    assert [s.pattern for s in mojo_compile.last_report().sites] == ["rms_norm.llama"]
    assert patches, "the rewritten graph did not reach Inductor"
    if not hasattr(inductor_config, "static_launch_user_defined_triton_kernels"):
        assert "static_launch_user_defined_triton_kernels" not in patches[-1]  # a torch without it: nothing set
    else:
        assert patches[-1]["static_launch_user_defined_triton_kernels"] is (not user)


class NormBesideLinear(torch.nn.Module):
    """An RMSNorm (fused) beside a linear: the smallest training graph with a Mojo op and parameters."""

    def __init__(self, hidden=16):
        super().__init__()
        self.norm, self.linear = torch.nn.RMSNorm(hidden, eps=1e-6), torch.nn.Linear(hidden, hidden)
        with torch.no_grad():
            self.norm.weight.add_(0.1 * torch.randn(hidden))

    def forward(self, x):
        return self.linear(x) + self.norm(x)


def _step(run, module, x):
    y = run(x)
    (torch.tanh(y) * torch.linspace(-1, 1, y.numel(), dtype=y.dtype, device=y.device).view_as(y)).sum().backward()
    return y, {name: p.grad for name, p in module.named_parameters()}


@pytest.mark.parametrize("disable", [[], ["rms_norm"]], ids=["fused", "nothing_fused"])
def test_cpp_wrapper_compiles_the_training_graph(disable):
    """Inductor's cpp_wrapper (and fx_wrapper) compiles on a graph's placeholder values where it finds them. The
    rewritten graph's are make_fx's detached snapshots: compiled on those, AOTAutograd made an inference graph and no
    parameter got a gradient. Compiled on its inputs, the module trains as eager does (within 2x eager's error
    against an fp64 copy + 1e-6: Inductor's fp32 reductions run in another order)."""
    import copy

    from conftest import rel

    torch.manual_seed(0)
    module = NormBesideLinear().to(DEVICE)
    eager, exact = copy.deepcopy(module), copy.deepcopy(module).double()
    options = {"cpp_wrapper": True, **({"disable": disable} if disable else {})}
    compiled = torch.compile(module, backend="mojo", options=options)
    x = torch.randn(3, 5, 16, device=DEVICE)
    y, grads = _step(compiled, module, x)
    y_eager, grads_eager = _step(eager, eager, x)
    y_exact, grads_exact = _step(exact, exact, x.double())
    assert rel(y, y_exact) <= 2 * rel(y_eager, y_exact) + 1e-6
    for name, want in grads_exact.items():
        assert grads[name] is not None, f"{name}: no gradient"
        assert rel(grads[name], want) <= 2 * rel(grads_eager[name], want) + 1e-6, name


def test_cpp_wrapper_under_dynamic_shapes():
    """With symbolic sizes the graph's size placeholders have SymInt values, which cpp_wrapper read as missing
    inputs: the wrapper took a size for x on every call. Compiled on its inputs it runs at two lengths."""
    from conftest import rel

    torch.manual_seed(0)
    module = NormBesideLinear().to(DEVICE)
    exact = NormBesideLinear().to(DEVICE).double()
    exact.load_state_dict(module.state_dict())
    compiled = torch.compile(module, backend="mojo", options={"cpp_wrapper": True}, dynamic=True)
    with torch.no_grad():
        for tokens in (5, 7):
            x = torch.randn(2, tokens, 16, device=DEVICE)
            assert rel(compiled(x), exact(x.double())) <= 2 * rel(module(x), exact(x.double())) + 1e-6
