import random, sys, time
from kh import *
import p8_attn_edges as E

seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
budget = float(sys.argv[2]) if len(sys.argv) > 2 else 150
random.seed(seed); torch.manual_seed(seed)
t0 = time.time(); n = 0
while time.time() - t0 < budget:
    B = random.choice([1, 2, 3]); HK = random.choice([1, 2, 3]); G = random.choice([1, 2, 3, 4])
    HQ = HK * G
    SQ = random.choice([1, 2, 3, 5, 16, 17, 31, 33]); SK = random.choice([1, 3, SQ, SQ + 1, 17, 40, 65])
    D = random.choice([8, 16, 24, 40, 64, 80])
    dt = random.choice([torch.bfloat16, torch.float16, torch.float32])
    causal = random.random() < 0.5
    window = random.choice([0, 0, 1, 3, 8, 100])
    softcap = random.choice([0.0, 0.0, 2.0, 20.0])
    sinks = torch.randn(HQ).to(random.choice([dt, torch.float32])) if random.random() < 0.3 else None
    mk = random.choice([None, None, "keys", "keys_holes", "bool", "add", "add_inf", "bool_head", "keys_allfalse"])
    m = None
    if mk == "keys":
        lo = random.randint(0, SK - 1); hi = random.randint(lo + 1, SK)
        m = torch.zeros(B, 1, 1, SK, dtype=torch.bool); m[..., lo:hi] = True
        if random.random() < 0.5:
            m[0, ..., :] = True
    elif mk == "keys_holes":
        m = torch.rand(B, 1, 1, SK) > 0.4
    elif mk == "keys_allfalse":
        m = torch.rand(B, 1, 1, SK) > 0.4; m[0] = False
    elif mk == "bool":
        m = torch.rand(B, 1, SQ, SK) > 0.4
    elif mk == "bool_head":
        m = torch.rand(1, HQ, SQ, SK) > 0.4
    elif mk == "add":
        m = torch.randn(B, 1, SQ, SK).to(random.choice([dt, torch.float32]))
    elif mk == "add_inf":
        m = torch.zeros(B, 1, SQ, SK); m[torch.rand(B, 1, SQ, SK) < 0.5] = float("-inf")
    qp = None
    if random.random() < 0.3:
        qp = torch.randint(-2, SK + 3, (SQ,))
    q = torch.randn(B, HQ, SQ, D, dtype=dt); k = torch.randn(B, HK, SK, D, dtype=dt); v = torch.randn(B, HK, SK, D, dtype=dt)
    if random.random() < 0.3:
        q = q.transpose(1, 2).contiguous().transpose(1, 2)
    tag = f"fz s{seed}#{n} B{B} {HQ}/{HK} {SQ}x{SK} D{D} {str(dt)[6:]} c{causal} w{window} sc{softcap} sink{sinks is not None} m={mk} qp={qp is not None}"
    E.run(q, k, v, m=m, qp=qp, sinks=sinks, scale=D ** -0.5, causal=causal, window=window, softcap=softcap, tag=tag)
    n += 1
print("cases", n, "bad", E.bad)
