"""Under the Inductor inner compiler, the embedding's backward is eager's kernel (lowering.KEPT_WHOLE_UNDER_INDUCTOR),
not Inductor's decomposition (an fp32 [V, H] buffer filled by atomics): the generated backward calls
mojo.embedding_dense_backward (which runs aten's), and the gradient is eager's bit for bit -- bf16, repeated tokens,
a padding index."""
import torch
from torch._inductor.utils import run_and_get_code

from conftest import DEVICE


def test_embedding_backward_is_eagers_kernel():
    torch.manual_seed(0)
    emb = torch.nn.Embedding(50, 16, padding_idx=0, device=DEVICE, dtype=torch.bfloat16)
    head = torch.nn.Linear(16, 16, bias=False, device=DEVICE, dtype=torch.bfloat16)

    def loss(ids):
        return head(emb(ids)).float().square().mean()

    ids = torch.randint(0, 50, (4, 33), device=DEVICE)
    ids[0, :3] = 0  # the padding row: no gradient
    ids[1, :5] = 7  # one row from many tokens: the sum whose order an atomic add would change
    compiled = torch.compile(loss, backend="mojo")  # default options: the Inductor inner compiler
    _, codes = run_and_get_code(lambda: compiled(ids).backward())
    got = emb.weight.grad.clone()
    emb.weight.grad = None
    loss(ids).backward()
    assert any("torch.ops.mojo.embedding_dense_backward.default(" in code for code in codes)
    assert torch.equal(got, emb.weight.grad)
    assert torch.equal(got[0], torch.zeros_like(got[0])) and got[7].abs().sum() > 0
