from h import probe
import torch, torch.nn.functional as F
torch.manual_seed(0)
BF = torch.bfloat16
def f32(x): return x if x.dtype == torch.float64 else x.float()
def lg(*s, dtype=BF): return (torch.randn(*s)*3).to(dtype)
V = 8
probe("halfview_dyn", lambda x, t: F.cross_entropy(f32(x).view(-1, V), t), [lg(2,5,2*V), torch.randint(0, V, (20,))], dynamic=True)
probe("halfview_dyn_fp32", lambda x, t: F.cross_entropy(x.view(-1, V), t), [lg(2,5,2*V, dtype=torch.float32), torch.randint(0, V, (20,))], dynamic=True)
probe("halfview_static", lambda x, t: F.cross_entropy(f32(x).view(-1, V), t), [lg(2,5,2*V), torch.randint(0, V, (20,))])
def lce(h, w, t): return F.cross_entropy(f32(F.linear(h, w)).view(-1, V), t)
probe("lce_halfview_dyn", lce, [torch.randn(2,5,4).to(BF), torch.randn(2*V,4).to(BF), torch.randint(0, V, (20,))], wrt=(0,1), dynamic=True)
probe("lce_halfview_static", lce, [torch.randn(2,5,4).to(BF), torch.randn(2*V,4).to(BF), torch.randint(0, V, (20,))], wrt=(0,1))
