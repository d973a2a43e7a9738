from h import probe
import torch, torch.nn.functional as F
torch.manual_seed(0)
BF = torch.bfloat16
def f32(x): return x if x.dtype == torch.float64 else x.float()
V, H = 37, 16
def lb(*s, classes=V, ign=(1,), val=-100):
    t = torch.randint(0, classes, s); t.view(-1)[list(ign)] = val; return t
def f(x, t, ign, ls): return F.cross_entropy(f32(x).view(-1, V), t, ignore_index=ign, label_smoothing=ls)
import functools
probe("sym_ignore", lambda x, t: f(x, t, 3, 0.1), [torch.randn(2,5,V).to(BF), lb(10, val=3)], dynamic=True)
def g(x, t, ign): return F.cross_entropy(f32(x).view(-1, V), t, ignore_index=ign)
for dyn in (None, True):
    torch.manual_seed(1)
    probe(f"ignore_arg_{dyn}", functools.partial(g, ign=3), [torch.randn(2,5,V).to(BF), lb(10, val=3)], dynamic=dyn)
def lce(h, w, t, n): return F.cross_entropy(f32(F.linear(h, w)).view(-1, V), t, reduction="sum") / n
probe("lce_num_items_int_dyn", lambda h, w, t: lce(h, w, t, 7), [torch.randn(2,5,H).to(BF), (torch.randn(V,H)*0.3).to(BF), lb(10)], wrt=(0,1), dynamic=True)
