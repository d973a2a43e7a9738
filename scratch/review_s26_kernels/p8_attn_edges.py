import sys
from kh import *
import p4_attn as P  # reuse attn64 (runs nothing at import when argv says so)

torch.manual_seed(1)
bad = 0


def run(q0, k0, v0, m=None, qp=None, sinks=None, scale=0.3, causal=False, window=0, softcap=0.0, tag=""):
    global bad
    gout = torch.randn(q0.shape, dtype=q0.dtype)
    outs = {}
    for tgt in ("ttx", "torch"):
        q, k, v = (t.detach().requires_grad_() for t in (q0, k0, v0))
        sk = sinks.detach().requires_grad_() if sinks is not None else None
        leaves = [q, k, v] + ([sk] if sinks is not None else [])
        try:
            with guarded() if tgt == "ttx" else contextlib.nullcontext():
                o, lse = mojo.attention(q, k, v, m, qp, scale, causal, window, softcap, sk, tgt)
                grads = torch.autograd.grad(o, leaves, gout)
        except Exception as e:
            print(f"  ERR {tgt} {tag}: {type(e).__name__}: {str(e)[:300]}"); bad += 1
            return
        outs[tgt] = (o, grads)
    L = [t.detach().double().requires_grad_() for t in (q0, k0, v0)] + ([sinks.double().requires_grad_()] if sinks is not None else [])
    qp64 = qp.long() if qp is not None else None
    o64 = P.attn64(L[0], L[1], L[2], m, qp64, scale, causal, window, softcap, L[3] if sinks is not None else None)
    g64 = torch.autograd.grad(o64, L, gout.double(), allow_unused=True)
    b = check(tag + " o", outs["ttx"][0], o64, outs["torch"][0], tol=1e-5)
    for i, n in enumerate(("dq", "dk", "dv", "dsink")[:len(L)]):
        b |= check(tag + " " + n, outs["ttx"][1][i], g64[i], outs["torch"][1][i], tol=1e-5)
    bad += b


bf, f32 = torch.bfloat16, torch.float32
for SQ, SK in (() if __name__ != "__main__" else ((1, 20), (5, 20), (20, 20), (33, 40))):
  if False: pass
for _unused in ():
    pass
for SQ, SK in (((1, 20), (5, 20), (20, 20), (33, 40)) if __name__ == "__main__" else ()):
    for dt in (bf, f32):
        B, HQ, HK, D = 2, 4, 2, 24
        q = torch.randn(B, HQ, SQ, D, dtype=dt)
        k1 = torch.randn(1, HK, SK, D, dtype=dt).expand(B, HK, SK, D)
        v1 = torch.randn(1, HK, SK, D, dtype=dt).expand(B, HK, SK, D)
        run(q, k1, v1, causal=True, tag=f"kv batch-bcast {SQ}x{SK} {dt}")
        k = torch.randn(B, HK, SK, D, dtype=dt); v = torch.randn(B, HK, SK, D, dtype=dt)
        kq = torch.randn(B, 1, SK, D, dtype=dt).expand(B, HQ, SK, D)
        vq = torch.randn(B, 1, SK, D, dtype=dt).expand(B, HQ, SK, D)
        run(q, kq, vq, tag=f"kv head-bcast MQA-as-MHA {SQ}x{SK} {dt}")
        mt = (torch.rand(B, 1, SK, SQ) > 0.3).transpose(-1, -2)
        run(q, k, v, m=mt, tag=f"mask transposed bool {SQ}x{SK} {dt}")
        ma = torch.randn(B, 1, SK, SQ, dtype=torch.float64).transpose(-1, -2)
        run(q, k, v, m=ma, tag=f"mask fp64 transposed {SQ}x{SK} {dt}")
        run(q, k, v, m=torch.randn(SQ, SK, dtype=torch.float16), tag=f"mask fp16 2d {SQ}x{SK} {dt}")
        run(q, k, v, m=(torch.rand(SK) > 0.4), tag=f"mask 1d keys {SQ}x{SK} {dt}")
        run(q, k, v, m=(torch.rand(B, 1, 1, 1) > 0.5), tag=f"mask per-batch scalar {SQ}x{SK} {dt}")
        run(q, k, v, m=(torch.rand(1, HQ, 1, SK) > 0.4), tag=f"mask per-head keys {SQ}x{SK} {dt}")
        run(q, k, v, sinks=torch.randn(2 * HQ)[::2].float(), tag=f"sinks fp32 strided {SQ}x{SK} {dt}")
        run(q, k, v, qp=torch.arange(SK - SQ, SK, dtype=torch.int32).flip(0), causal=True, tag=f"qpos int32 flipped {SQ}x{SK} {dt}")
        run(q, k, v, qp=torch.arange(-2, SQ - 2)[:SQ] * 3, causal=True, window=4, tag=f"qpos neg/sparse {SQ}x{SK} {dt}")
        run(q, k, v, qp=torch.arange(SQ) + SK + 5, causal=True, window=30, tag=f"qpos beyond cache {SQ}x{SK} {dt}")
        run(q, k, v, qp=torch.arange(2 * SQ)[::2].clone()[:SQ], causal=True, tag=f"qpos {SQ}x{SK} {dt}")
        run(q, k, v, qp=torch.arange(2 * SQ)[::2], causal=True, tag=f"qpos strided view {SQ}x{SK} {dt}")
        run(q, k, v, scale=0.0, causal=True, tag=f"scale 0 {SQ}x{SK} {dt}")
        run(q, k, v, causal=True, window=1, tag=f"window 1 {SQ}x{SK} {dt}")
        run(q, k, v, causal=False, window=3, tag=f"window no causal {SQ}x{SK} {dt}")
        run(q, k, v, softcap=1e-3, tag=f"tiny softcap {SQ}x{SK} {dt}")
        run(q * 30, k * 30, v, scale=1.0, tag=f"large scores {SQ}x{SK} {dt}")
print("TOTAL BAD", bad)
