from h import probe
import torch, torch.nn.functional as F
torch.manual_seed(0)
BF = torch.bfloat16
T = {"target": "ttx"}
def f32(x): return x if x.dtype == torch.float64 else x.float()
def lg(*s, dtype=BF): return (torch.randn(*s)*3).to(dtype)
def lb(*s, classes, ign=(1,), val=-100):
    t = torch.randint(0, classes, s); t.view(-1)[list(ign)] = val; return t
V = 16390
probe("ttx_bigV_ls", lambda x, t: F.cross_entropy(f32(x).view(-1, V), t, label_smoothing=0.1, ignore_index=0), [lg(1,3,V), lb(3, classes=V, val=0)], options=T)
V = 37
probe("ttx_ls_ign0", lambda x, t: F.cross_entropy(f32(x).view(-1, V), t, label_smoothing=0.2, ignore_index=0), [lg(2,5,V), lb(10, classes=V, val=0)], options=T)
probe("ttx_ls_neginf", lambda x, t: F.cross_entropy(f32(x).view(-1, V), t, label_smoothing=0.1), [lg(2,5,V).index_fill(2, torch.tensor([3]), float('-inf')), lb(10, classes=V)], options=T)
probe("ttx_neginf", lambda x, t: F.cross_entropy(f32(x).view(-1, V), t), [lg(2,5,V).index_fill(2, torch.tensor([3]), float('-inf')), lb(10, classes=V)], options=T)
probe("ttx_transposed", lambda x, t: F.cross_entropy(f32(x).t(), t, reduction="sum"), [lg(V, 10), lb(10, classes=V)], options=T)
probe("ttx_expand", lambda x, t: F.cross_entropy(f32(x).expand(10, V), t, reduction="none"), [lg(1, V), lb(10, classes=V)], options=T, grad=torch.randn(10))
probe("ttx_fp16_none", lambda x, t: F.cross_entropy(f32(x).view(-1, V), t, reduction="none"), [lg(2,5,V,dtype=torch.float16), lb(10, classes=V)], options=T, grad=torch.randn(10))
H = 16
def lce(h, w, t, **kw): return F.cross_entropy(f32(F.linear(h, w)).view(-1, V), t, **kw)
probe("ttx_lce", lce, [torch.randn(2,5,H).to(BF), (torch.randn(V,H)*0.3).to(BF), lb(10, classes=V)], wrt=(0,1), options=T)
probe("ttx_lce_ls_sum", lambda h,w,t: lce(h,w,t,label_smoothing=0.1, reduction="sum", ignore_index=2), [torch.randn(2,5,H).to(BF), (torch.randn(V,H)*0.3).to(BF), lb(10, classes=V, val=2)], wrt=(0,1), options=T)
def sc(h,w,t): z = F.linear(h,w); return F.cross_entropy(f32(torch.tanh(z/30.0)*30.0).view(-1,V), t, label_smoothing=0.1)
probe("ttx_lce_softcap", sc, [torch.randn(2,5,H).to(BF)*10, (torch.randn(V,H)*0.3).to(BF), lb(10, classes=V)], wrt=(0,1), options=T)
def scl(h,w,t): z = F.linear(h,w) * 0.25; return F.cross_entropy(f32(z).view(-1,V), t, reduction="none")
probe("ttx_lce_scale_none", scl, [torch.randn(2,5,H).to(BF), (torch.randn(V,H)*0.3).to(BF), lb(10, classes=V)], wrt=(0,1), options=T, grad=torch.randn(10))
probe("ttx_lce_fp32_w_only", lce, [torch.randn(2,5,H), (torch.randn(V,H)*0.3), lb(10, classes=V)], wrt=(1,), options=T)
probe("ttx_lce_allign", lce, [torch.randn(2,5,H).to(BF), (torch.randn(V,H)*0.3).to(BF), lb(10, classes=V, ign=range(10))], wrt=(0,1), options=T)
probe("ttx_lce_empty", lambda h,w,t: lce(h,w,t,reduction="sum"), [torch.randn(0,5,H).to(BF), (torch.randn(V,H)*0.3).to(BF), lb(0, classes=V, ign=())], wrt=(0,1), options=T)
probe("torch_lce_empty", lambda h,w,t: lce(h,w,t,reduction="sum"), [torch.randn(0,5,H).to(BF), (torch.randn(V,H)*0.3).to(BF), lb(0, classes=V, ign=())], wrt=(0,1))
