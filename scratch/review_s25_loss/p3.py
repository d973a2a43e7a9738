from h import probe
import torch, torch.nn.functional as F
torch.manual_seed(0)
V, H = 37, 16
BF = torch.bfloat16
def f32(x): return x if x.dtype == torch.float64 else x.float()
def hd(*s, dtype=BF): return torch.randn(*s).to(dtype)
def wt(dtype=BF): return (torch.randn(V, H) * 0.3).to(dtype)
def lb(*s, classes=V, ign=(1,), val=-100):
    t = torch.randint(0, classes, s); t.view(-1)[list(ign)] = val; return t
def lce(h, w, t, **kw): return F.cross_entropy(f32(F.linear(h, w)).view(-1, V), t, **kw)
probe("lce_basic", lce, [hd(2,5,H), wt(), lb(10)], wrt=(0,1))
probe("lce_fp32", lce, [hd(2,5,H,dtype=torch.float32), wt(torch.float32), lb(10)], wrt=(0,1))
probe("lce_ls_ign0", lambda h,w,t: lce(h,w,t,label_smoothing=0.2, ignore_index=0), [hd(2,5,H), wt(), lb(10, val=0)], wrt=(0,1))
probe("lce_sum", lambda h,w,t: lce(h,w,t,reduction="sum")/7, [hd(2,5,H), wt(), lb(10)], wrt=(0,1))
probe("lce_none", lambda h,w,t: lce(h,w,t,reduction="none"), [hd(2,5,H), wt(), lb(10)], wrt=(0,1), grad=torch.randn(10))
probe("lce_all_ign", lce, [hd(2,5,H), wt(), lb(10, ign=range(10))], wrt=(0,1))
probe("lce_all_ign_sum", lambda h,w,t: lce(h,w,t,reduction="sum"), [hd(2,5,H), wt(), lb(10, ign=range(10))], wrt=(0,1))
def tied(ids, w, t):
    h = F.embedding(ids, w) * 2
    return lce(h, w, t)
probe("tied", tied, [torch.randint(0, V, (2,5)), wt(), lb(10)], wrt=(1,))
probe("bias", lambda h,w,b,t: F.cross_entropy(f32(F.linear(h, w, b)).view(-1, V), t), [hd(2,5,H), wt(), torch.randn(V).to(BF), lb(10)], wrt=(0,1,2))
def sc1(h,w,t): z = F.linear(h,w); return F.cross_entropy(f32(torch.tanh(z/30.0)*30.0).view(-1,V), t)
def sc2(h,w,t): z = F.linear(h,w); return F.cross_entropy(f32(30.0*torch.tanh(z/30.0)).view(-1,V), t)
def sc3(h,w,t): z = F.linear(h,w); return F.cross_entropy(f32((z/30.0).tanh()*30.0).view(-1,V), t)
def sc4(h,w,t): z = F.linear(h,w); return F.cross_entropy(f32(torch.tanh(z*(1/30.0))*30.0).view(-1,V), t)
def sc5(h,w,t): z = F.linear(h,w); return F.cross_entropy(f32(torch.tanh(z/30)*30).view(-1,V), t)
def sc6(h,w,t): z = F.linear(h,w); z = z/30.0; z = torch.tanh(z); z = z*30.0; return F.cross_entropy(f32(z).view(-1,V), t)
def sc7(h,w,t): z = f32(F.linear(h,w)); return F.cross_entropy((torch.tanh(z/30.0)*30.0).view(-1,V), t)
for f in (sc1, sc2, sc3, sc4, sc5, sc6, sc7):
    probe("softcap_"+f.__name__, f, [hd(2,5,H)*20, wt(), lb(10)], wrt=(0,1))
def scale_int(h,w,t): return F.cross_entropy(f32(F.linear(h,w)*2).view(-1,V), t)
def scale_neg(h,w,t): return F.cross_entropy(f32(F.linear(h,w)*-0.5).view(-1,V), t)
def div_int(h,w,t): return F.cross_entropy(f32(F.linear(h,w)/3).view(-1,V), t)
def rscale(h,w,t): return F.cross_entropy(f32(0.5*F.linear(h,w)).view(-1,V), t)
for f in (scale_int, scale_neg, div_int, rscale):
    probe("scale_"+f.__name__, f, [hd(2,5,H), wt(), lb(10)], wrt=(0,1))
def accum(h,w,t): return lce(h[:1], w, t[:5]) / 2 + lce(h[1:], w, t[5:]) / 2
probe("accum2", accum, [hd(2,5,H), wt(), lb(10)], wrt=(0,1))
def loss_twice(h,w,t): l = lce(h,w,t); return l * l
probe("loss_sq", loss_twice, [hd(2,5,H), wt(), lb(10)], wrt=(0,1))
probe("lce_dyn", lce, [hd(2,5,H), wt(), lb(10)], wrt=(0,1), dynamic=True)
probe("lce_ind", lambda h,w,t: lce(h,w,t,label_smoothing=0.1), [hd(2,5,H), wt(), lb(10)], wrt=(0,1), options={"inner_compiler": "inductor"})
probe("lce_ind_fp32", lambda h,w,t: lce(h,w,t,reduction="sum"), [hd(2,5,H,dtype=torch.float32), wt(torch.float32), lb(10)], wrt=(0,1), options={"inner_compiler": "inductor"})
probe("lce_1tok", lce, [hd(1,1,H), wt(), lb(1, ign=())], wrt=(0,1))
probe("lce_w_only", lce, [hd(2,5,H), wt(), lb(10)], wrt=(1,))
probe("lce_matmul_T", lambda h,w,t: F.cross_entropy(f32(h @ w.T).view(-1, V), t), [hd(2,5,H), wt(), lb(10)], wrt=(0,1))
probe("lce_fp16_sum", lambda h,w,t: lce(h,w,t,reduction="sum"), [hd(2,5,H,dtype=torch.float16), wt(torch.float16), lb(10)], wrt=(0,1))
probe("lce_nograd", lce, [hd(2,5,H), wt(), lb(10)], wrt=())
