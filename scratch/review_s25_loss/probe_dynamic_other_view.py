"""Finding 1: a loss on another view of the logits than [N, V] (multi-token heads: [B, T, k*V] viewed [-1, V]),
compiled with dynamic shapes (dynamic=True, or automatically on the second sequence length): the compile raises
where eager runs (rows_agree cannot prove the labels' symbolic length differs from the [N, V] view's)."""
import conftest  # noqa
import torch, torch.nn.functional as F
import mojo_compile

V, K = 8, 2


def loss_fn(x, t):  # k heads' logits side by side, one label per head and position
    return F.cross_entropy(x.float().view(-1, V), t)


for opts in ({"inner_compiler": "eager"}, {}):
    torch._dynamo.reset()
    compiled = torch.compile(loss_fn, backend="mojo", options=opts)
    for T in (5, 7):  # the second length recompiles with dynamic shapes (automatic dynamic)
        x = torch.randn(2, T, K * V).bfloat16()
        t = torch.randint(0, V, (2 * T * K,))
        try:
            got = compiled(x, t)
            print(opts, T, "ok", got.item(), loss_fn(x, t).item())
        except Exception as e:
            print(opts, T, "CRASH", type(e).__name__, str(e).splitlines()[0][:200], "| eager:", loss_fn(x, t).item())

print("--- dynamic=True")
x = torch.randn(2, 5, K * V).bfloat16()
t = torch.randint(0, V, (2 * 5 * K,))
h, w = torch.randn(2, 5, 4).bfloat16(), torch.randn(K * V, 4).bfloat16()
probs = torch.rand(5, 2 * K * V).softmax(-1)
cases = {
    "materialised": (loss_fn, (x, t)),
    "materialised fp32": (lambda x, t: F.cross_entropy(x.view(-1, V), t), (x.float(), t)),
    "lm head": (lambda h, w, t: F.cross_entropy(F.linear(h, w).float().view(-1, V), t), (h, w, t)),
    "probabilities": (lambda x, p: F.cross_entropy(x.float().view(5, 2 * K * V), p), (x, probs)),
}
for name, (fn, args) in cases.items():
    for opts in ({"inner_compiler": "eager"}, {}):
        torch._dynamo.reset()
        try:
            got = torch.compile(fn, backend="mojo", options=opts, dynamic=True)(*args)
            print(name, opts, "ok", got.item(), fn(*args).item())
        except Exception as e:
            print(name, opts, "CRASH", type(e).__name__, str(e).strip().splitlines()[-1][:150], "| eager:",
                  fn(*args).item())
