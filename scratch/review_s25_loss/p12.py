from h import probe
import torch, torch.nn.functional as F
torch.manual_seed(0)
BF = torch.bfloat16
def f32(x): return x if x.dtype == torch.float64 else x.float()
V, H = 37, 16
def lb(*s, classes=V, ign=(1,), val=-100):
    t = torch.randint(0, classes, s); t.view(-1)[list(ign)] = val; return t
def lce(h, w, t, **kw): return F.cross_entropy(f32(F.linear(h, w)).view(-1, V), t, **kw)
def valhead(h, w, v, t): return lce(h, w, t) + (h @ v).float().square().mean()
probe("valhead", valhead, [torch.randn(2,5,H).to(BF), (torch.randn(V,H)*0.3).to(BF), torch.randn(H,1).to(BF), lb(10)], wrt=(0,1,2))
probe("valhead_ind", valhead, [torch.randn(2,5,H).to(BF), (torch.randn(V,H)*0.3).to(BF), torch.randn(H,1).to(BF), lb(10)], wrt=(0,1,2), options={"inner_compiler": "inductor"})
def two_losses_same_head(h, w, t, t2): return lce(h, w, t) + 0.5 * lce(h, w, t2, reduction="sum")
probe("two_losses", two_losses_same_head, [torch.randn(2,5,H).to(BF), (torch.randn(V,H)*0.3).to(BF), lb(10), lb(10, ign=(2,3))], wrt=(0,1))
def hidden_returned(h, w, t): hh = h * 2; return lce(hh, w, t), hh
probe("hidden_returned", hidden_returned, [torch.randn(2,5,H).to(BF), (torch.randn(V,H)*0.3).to(BF), lb(10)], wrt=(0,1))
def lce_dynV(h, w, t): return F.cross_entropy(f32(F.linear(h, w)).view(-1, w.shape[0]), t, label_smoothing=0.1)
probe("lce_dyn_ls_ind", lce_dynV, [torch.randn(2,5,H).to(BF), (torch.randn(V,H)*0.3).to(BF), lb(10)], wrt=(0,1), options={"inner_compiler": "inductor"}, dynamic=True)
probe("ce_dyn_ls_ttx", lambda x, t: F.cross_entropy(f32(x).view(-1, x.shape[-1]), t, label_smoothing=0.1), [torch.randn(2,5,V).to(BF), lb(10)], options={"target": "ttx"}, dynamic=True)
