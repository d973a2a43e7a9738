"""add_layer_norm on torch_npu: forward statistics from npu_add_layer_norm (of the exact fp32 sum), backward on the
torch reference from the saved ROUNDED sum with those statistics (on an NPU _aten_keeps_fp32_statistics is True).
Gradient error vs an fp64 copy, against eager's, on bf16 inputs with a large common offset."""
import sys
import conftest  # noqa: F401
import torch
import torch.nn.functional as F
sys.path.insert(0, "scratch/review_s26_npu")
import fake_torch_npu as fake
sys.modules["torch_npu"] = fake.module()
from mojo_compile.ops import layer_norm

layer_norm._aten_keeps_fp32_statistics = lambda x: True  # as on an NPU device
torch.manual_seed(0)


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


for offset, scale in ((0.0, 1.0), (1.0, 2.0), (100.0, 1.0), (1000.0, 3.0)):
    errs = {"npu": [], "eager": []}
    for trial in range(5):
        x = (offset + scale * torch.randn(4, 6, 64)).to(torch.bfloat16)
        r = torch.randn(4, 6, 64).to(torch.bfloat16)
        w = (1 + 0.3 * torch.randn(64)).to(torch.bfloat16)
        b = torch.randn(64).to(torch.bfloat16)
        g = torch.randn(4, 6, 64).to(torch.bfloat16)
        # fp64 truth
        x64, r64, w64, b64 = (t.double().requires_grad_() for t in (x, r, w, b))
        F.layer_norm(x64 + r64, (64,), w64, b64, 1e-5).backward(g.double())
        # eager bf16
        xe, re_, we, be = (t.clone().requires_grad_() for t in (x, r, w, b))
        ye = F.layer_norm(xe + re_, (64,), we, be, 1e-5)
        ye.backward(g)
        # npu mapping: forward by the fake op, backward by the reference with the NPU's statistics
        y, total, mean, rstd = layer_norm.npu_add_forward(x, r, w, b, 1e-5)
        # aten on an NPU (like CUDA) takes bf16 x with fp32 statistics and computes in fp32: simulated in fp32
        dx, dw, db = (t.to(torch.bfloat16) for t in layer_norm.reference_backward(
            g.float(), total.float(), w.float(), mean, rstd, 1e-5, True, True, None))
        errs["npu"].append((rel(y, ye.detach() * 0 + F.layer_norm(x64 + r64, (64,), w64, b64, 1e-5).detach()),
                            rel(dx, x64.grad), rel(dw, w64.grad), rel(db, b64.grad)))
        errs["eager"].append((rel(ye.detach(), F.layer_norm(x64 + r64, (64,), w64, b64, 1e-5).detach()),
                              rel(xe.grad, x64.grad), rel(we.grad, w64.grad), rel(be.grad, b64.grad)))
    for who in ("npu", "eager"):
        worst = [max(e[i] for e in errs[who]) for i in range(4)]
        print(f"offset {offset:6} {who:5s} worst rel err y {worst[0]:.2e} dx {worst[1]:.2e} dw {worst[2]:.2e} "
              f"db {worst[3]:.2e}")
