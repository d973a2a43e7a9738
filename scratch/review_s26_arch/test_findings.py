"""Review s26 (arch): real Hugging Face families outside tests/test_hf_models.py's FAMILIES.

Each test fails on the current code for the reason its docstring names."""
import conftest  # noqa: F401  (TRITON_INTERPRET before mojo_compile)

import pytest
import torch

import mojo_compile
from conftest import rel

transformers = pytest.importorskip("transformers")

COMMON = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def tiny(config):
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


@pytest.mark.parametrize("family", ["glm", "glm4"])
def test_glm_interleaved_partial_rope_fuses(family):
    """Missed fusion. GLM / GLM-4 (also ERNIE-4.5, Helium: the R4b spelling) take the first half of cos / sin and
    repeat-interleave it inside apply_rotary_pos_emb, then rotate the first cos.shape[-1] dims every-two. The rope
    patterns only know cos / sin that the rotary module has already interleaved (Cohere, R4a), so no layer fuses;
    the near-miss note blames `aten.repeat_interleave.self_int` where the pattern has `aten.unsqueeze`."""
    config_class = {"glm": transformers.GlmConfig, "glm4": transformers.Glm4Config}[family]
    model = tiny(config_class(**COMMON, head_dim=8, partial_rotary_factor=0.5))
    ids = torch.randint(3, 128, (2, 11))
    mask = torch.ones(2, 11, dtype=torch.long)
    mask[1, :3] = 0
    torch._dynamo.reset()
    mojo_compile.reset_report()
    compiled = torch.compile(model, backend="mojo", options={"target": "torch", "inner_compiler": "eager"})
    out = compiled(input_ids=ids, attention_mask=mask, labels=ids)
    out.loss.backward()
    reference = model(input_ids=ids, attention_mask=mask, labels=ids)
    assert rel(out.logits, reference.logits) < 1e-5
    counts = mojo_compile.last_report().counts()
    assert counts["mojo.rope"] == COMMON["num_hidden_layers"], counts


def test_user_pattern_slicing_by_half_the_width_compiles():
    """Crash. A user pattern written like rotate_half (`x[..., x.shape[-1] // 2:]`) whose site has an input that
    needs a gradient: the first compile fails in Dynamo's guard creation (IndexError in produce_guards_verbose:
    `symbol_to_source[symbol][0]`) where eager runs. `_no_backward` -> `_ops_without_backward` traces the
    replacement with make_fx(tracing_mode="fake") inside the compile, under Dynamo's TracingContext: the slice
    allocates a guard on a symbol of that trace in the compile's ShapeEnv, which has no source for it. Later
    compiles pass only because the answer is cached on the pattern (pattern._without_backward)."""
    def search(x, y):
        return x[..., x.shape[-1] // 2:] * y[..., y.shape[-1] // 2:]

    def replace(x, y):
        return search(x, y).clone()

    name = "s26_arch.half_width_product"
    mojo_compile.register_pattern(name, search, replace, [(torch.randn(2, 3, 8), torch.randn(2, 3, 8))])
    try:
        def f(x, y):
            return search(x, y).sum(-1) * 3

        x = torch.randn(2, 5, 16, requires_grad=True)
        y = torch.randn(2, 5, 16)
        torch._dynamo.reset()
        compiled = torch.compile(f, backend="mojo", options={"target": "torch", "inner_compiler": "eager"})
        out = compiled(x, y)
        out.sum().backward()
        grad = x.grad.clone()
        x.grad = None
        f(x, y).sum().backward()
        assert torch.equal(out, f(x, y)) and torch.equal(grad, x.grad)
    finally:
        mojo_compile.unregister_pattern(name)
        torch._dynamo.reset()
