from kh import *
import p4_attn as P
torch.manual_seed(1)
B, HQ, HK, D = 2, 4, 2, 24
for SQ, SK in ((1, 20), (5, 20), (20, 20), (5, 300)):
    for dt in (torch.bfloat16, torch.float16, torch.float32):
        q = torch.randn(B, HQ, SQ, D, dtype=dt); k = torch.randn(B, HK, SK, D, dtype=dt); v = torch.randn(B, HK, SK, D, dtype=dt)
        for sdt in (torch.float32, dt):
            sinks = torch.randn(HQ).to(sdt)
            o_t, l_t = mojo.attention(q, k, v, None, None, 0.3, False, 0, 0.0, sinks, "ttx")
            o_r, l_r = mojo.attention(q, k, v, None, None, 0.3, False, 0, 0.0, sinks, "torch")
            # fp64 lse
            kk = k.double().repeat_interleave(HQ // HK, 1)
            s = q.double() @ kk.transpose(-1, -2) * 0.3
            full = torch.cat([s, sinks.double().view(1, HQ, 1, 1).expand(B, HQ, SQ, 1)], -1)
            l64 = torch.logsumexp(full, -1)
            print(SQ, SK, dt, "sinks", sdt, "lse err ttx %.3g torch %.3g" % ((l_t.double() - l64).abs().max(), (l_r.double() - l64).abs().max()),
                  " out rel ttx %.3g torch %.3g" % (rel(o_t, P.attn64(q.double(), k.double(), v.double(), None, None, 0.3, False, 0, 0.0, sinks.double())), rel(o_r, P.attn64(q.double(), k.double(), v.double(), None, None, 0.3, False, 0, 0.0, sinks.double()))))
