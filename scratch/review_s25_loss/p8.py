from h import probe
import torch, torch.nn.functional as F
torch.manual_seed(0)
BF = torch.bfloat16
I = {"inner_compiler": "inductor"}
def f32(x): return x if x.dtype == torch.float64 else x.float()
def lg(*s, dtype=BF): return (torch.randn(*s)*3).to(dtype)
def lb(*s, classes, ign=(1,), val=-100):
    t = torch.randint(0, classes, s); t.view(-1)[list(ign)] = val; return t
V, H = 37, 16
probe("ind_allign_mean", lambda x, t: F.cross_entropy(f32(x).view(-1, V), t), [lg(2,5,V), lb(10, classes=V, ign=range(10))], options=I)
probe("ind_allign_ls", lambda x, t: F.cross_entropy(f32(x).view(-1, V), t, label_smoothing=0.1), [lg(2,5,V), lb(10, classes=V, ign=range(10))], options=I)
probe("ind_none_dyn", lambda x, t: F.cross_entropy(f32(x).view(-1, V), t, reduction="none", ignore_index=4, label_smoothing=0.2), [lg(2,5,V), lb(10, classes=V, val=4)], options=I, dynamic=True, grad=torch.randn(10))
probe("ind_fp16", lambda x, t: F.cross_entropy(f32(x).view(-1, V), t, reduction="sum"), [lg(2,5,V,dtype=torch.float16), lb(10, classes=V)], options=I)
def lce(h, w, t, **kw): return F.cross_entropy(f32(F.linear(h, w)).view(-1, V), t, **kw)
probe("ind_lce_allign", lce, [torch.randn(2,5,H).to(BF), (torch.randn(V,H)*0.3).to(BF), lb(10, classes=V, ign=range(10))], wrt=(0,1), options=I)
probe("ind_lce_dyn_ls", lambda h,w,t: lce(h,w,t,label_smoothing=0.1), [torch.randn(2,5,H).to(BF), (torch.randn(V,H)*0.3).to(BF), lb(10, classes=V)], wrt=(0,1), options=I, dynamic=True)
def sc(h,w,t): z = F.linear(h,w); return F.cross_entropy(f32(torch.tanh(z/30.0)*30.0).view(-1,V), t, reduction="sum")
probe("ind_lce_softcap", sc, [torch.randn(2,5,H).to(BF)*10, (torch.randn(V,H)*0.3).to(BF), lb(10, classes=V)], wrt=(0,1), options=I)
probe("ind_lce_fp16", lce, [torch.randn(2,5,H).half(), (torch.randn(V,H)*0.3).half(), lb(10, classes=V)], wrt=(0,1), options=I)
def tied(ids, w, t): return lce(F.embedding(ids, w), w, t)
probe("ind_tied", tied, [torch.randint(0, V, (2,5)), (torch.randn(V,H)*0.3).to(BF), lb(10, classes=V)], wrt=(1,), options=I)
probe("ind_lce_1tok", lce, [torch.randn(1,1,H).to(BF), (torch.randn(V,H)*0.3).to(BF), lb(1, classes=V, ign=())], wrt=(0,1), options=I)
