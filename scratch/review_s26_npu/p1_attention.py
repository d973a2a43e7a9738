"""Drive attention.npu_forward through the fake torch_npu over varied inputs; compare with the torch reference,
and say whether _npu_reason (on npu stand-ins) would have sent the call to FIA."""
import sys
import conftest  # noqa: F401
import torch
sys.path.insert(0, "scratch/review_s26_npu")
import fake_torch_npu as fake
sys.modules["torch_npu"] = fake.module()
from mojo_compile.ops import attention

torch.manual_seed(0)


def run(name, q, k, v, mask=None, q_pos=None, causal=False, window=0, scale=0.3):
    args = (q, k, v, mask, q_pos, scale, causal, window, 0.0, None)
    npu_args = tuple(fake.on_npu(a) if isinstance(a, torch.Tensor) and a is not q_pos else a for a in args)
    reason = attention._npu_reason(*npu_args)
    before = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    try:
        out, lse = attention.npu_forward(*args)
    except fake.Refused as e:
        print(f"{name:40s} reason={reason!r:12.12} REFUSED by the documented op: {e}")
        return
    ref_out, ref_lse = attention.reference(*args)
    err = (out.double() - ref_out.double()).abs().max().item()
    ref_err = (ref_out.double() - attention.reference(*[a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args])[0]).abs().max().item()
    lse_ok = torch.allclose(lse, ref_lse, rtol=1e-4, atol=1e-4, equal_nan=False) or torch.equal(lse.isinf(), ref_lse.isinf())
    mutated = any(isinstance(a, torch.Tensor) and not torch.equal(a, b) for a, b in zip(args, before))
    print(f"{name:40s} reason={reason!r:12.12} out err {err:.2e} (ref vs fp64 {ref_err:.2e}) lse_ok={lse_ok} mutated={mutated} sparse={fake.CALLS[-1]['sparse_mode']}")


def qkv(b, h, hkv, sq, skv, d, dtype=torch.bfloat16, dv=None):
    return (torch.randn(b, h, sq, d, dtype=dtype), torch.randn(b, hkv, skv, d, dtype=dtype),
            torch.randn(b, hkv, skv, dv or d, dtype=dtype))


run("plain causal prefill", *qkv(2, 4, 2, 6, 6, 16), causal=True)
run("decode causal (Sq=1)", *qkv(2, 4, 2, 1, 9, 16), causal=True)
run("decode causal B=1", *qkv(1, 4, 2, 1, 9, 16), causal=True)
run("chunk causal 3x9", *qkv(2, 4, 2, 3, 9, 16), causal=True)
run("GQA 8/1", *qkv(2, 8, 1, 5, 5, 32), causal=True)
run("full fp16", *qkv(2, 4, 4, 5, 7, 16, torch.float16))
run("padding mask + causal", *qkv(2, 4, 2, 6, 6, 16), mask=torch.rand(2, 1, 1, 6) > 0.3, causal=True)
run("decode + padding mask", *qkv(2, 4, 2, 1, 6, 16), mask=torch.rand(2, 1, 1, 6) > 0.3, causal=True)
run("window 3", *qkv(2, 4, 2, 7, 7, 16), causal=True, window=3)
run("decode window 3 (Sq=1)", *qkv(2, 4, 2, 1, 7, 16), causal=True, window=3)
run("q_pos static cache", *qkv(2, 4, 2, 1, 9, 16), q_pos=torch.tensor([4]), causal=True)
run("more queries than keys", *qkv(2, 4, 2, 5, 3, 16), causal=True)
q, k, v = qkv(2, 4, 2, 6, 6, 16)
run("v non-contiguous (HF transpose)", q, k, v.transpose(1, 2).contiguous().transpose(1, 2))
q, k, v = qkv(2, 4, 2, 6, 6, 16)
run("q non-contiguous", q.transpose(1, 2).contiguous().transpose(1, 2), k, v, causal=True)
run("Dv != D (MLA-like 32/16)", *qkv(2, 4, 2, 6, 6, 32, dv=16), causal=True)
run("D = 24 (not 16-aligned) prefill", *qkv(2, 4, 2, 6, 6, 24), causal=True)
run("D = 8 prefill", *qkv(1, 2, 2, 5, 5, 8), causal=True)
run("D = 24 decode", *qkv(2, 4, 2, 1, 6, 24), causal=True)
run("D = 576 (> 512)", *qkv(1, 2, 2, 4, 4, 576), causal=True)
run("N = 320 heads (> 256)", *qkv(1, 320, 64, 4, 4, 16), causal=True)
