from h import probe
import torch, torch.nn.functional as F
torch.manual_seed(0)
BF = torch.bfloat16
def f32(x): return x if x.dtype == torch.float64 else x.float()
def lg(*s, dtype=BF): return (torch.randn(*s)*3).to(dtype)
def lb(*s, classes, ign=(1,), val=-100):
    t = torch.randint(0, classes, s); t.view(-1)[list(ign)] = val; return t
V, H = 37, 16
def lab_mut(x, t):
    xf = f32(x)
    t = t.clone()
    t[t < 10] = -100
    return F.cross_entropy(xf.view(-1, V), t)
probe("labels_mutated_between", lab_mut, [lg(2,5,V), lb(10, classes=V)])
def lab_mut_fill(x, t):
    xf = f32(x)
    t = t.clone()
    t.masked_fill_(t < 10, -100)
    return F.cross_entropy(xf.view(-1, V), t)
probe("labels_masked_fill_between", lab_mut_fill, [lg(2,5,V), lb(10, classes=V)])
def logit_mut(x, t):
    y = x * 1
    xf = f32(y)
    y.mul_(2)
    return F.cross_entropy(xf.view(-1, V), t)
probe("logits_mutated_between", logit_mut, [lg(2,5,V), lb(10, classes=V)])
def logit_mut32(x, t):
    y = x * 1
    z = y.view(-1, V)
    y.mul_(2)
    return F.cross_entropy(z, t)
probe("logits32_mutated_between", logit_mut32, [lg(2,5,V, dtype=torch.float32), lb(10, classes=V)])
def lce_lab_mut(h, w, t):
    z = f32(F.linear(h, w)).view(-1, V)
    t = t.clone(); t[t < 10] = -100
    return F.cross_entropy(z, t)
probe("lce_labels_mutated_between", lce_lab_mut, [torch.randn(2,5,H).to(BF), (torch.randn(V,H)*0.3).to(BF), lb(10, classes=V)], wrt=(0,1))
def lce_h_mut(h, w, t):
    h = h * 1
    z = f32(F.linear(h, w)).view(-1, V)
    with torch.no_grad():
        h.mul_(2)
    return F.cross_entropy(z, t)
probe("lce_hidden_mutated_between", lce_h_mut, [torch.randn(2,5,H).to(BF), (torch.randn(V,H)*0.3).to(BF), lb(10, classes=V)], wrt=(1,))
def lce_w_mut(h, w, t):
    w = w * 1
    z = f32(F.linear(h, w)).view(-1, V)
    w.add_(1)
    return F.cross_entropy(z, t)
probe("lce_weight_mutated_between", lce_w_mut, [torch.randn(2,5,H).to(BF), (torch.randn(V,H)*0.3).to(BF), lb(10, classes=V)], wrt=(0,))
def lab_input_mut(x, t):
    xf = f32(x)
    t.masked_fill_(t < 10, -100)
    return F.cross_entropy(xf.view(-1, V), t)
probe("labels_input_mutated_between", lab_input_mut, [lg(2,5,V), lb(10, classes=V)])
