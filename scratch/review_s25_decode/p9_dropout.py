"""SDPA with dropout_p > 0 (training-style attention): must not become the dropout-free op."""
from h import *
import torch.nn.functional as F
q, k, v = (torch.randn(1, 2, 6, 8) for _ in range(3))
m = torch.ones(6, 6, dtype=torch.bool).tril()
for name, fn in {
    "dropout 0.5": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.5),
    "dropout 0.5 causal": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.5, is_causal=True),
    "dropout 1.0 mask": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=m, dropout_p=1.0),
    "F.dropout eager attn": lambda q, k, v: F.dropout(torch.softmax(q @ k.transpose(-1, -2) * 0.3, -1, dtype=torch.float32), p=1.0, training=True) @ v,
}.items():
    torch._dynamo.reset(); mojo_compile.reset_report()
    c = comp(fn)(q, k, v)
    print(name, sites(), "compiled all zero:", bool((c == 0).all()), "eager all zero:", bool((fn(q, k, v) == 0).all()))
