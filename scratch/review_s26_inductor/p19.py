from h import *
import torch.nn.functional as F
torch.manual_seed(0)
H, D, V = 32, 16, 97
def rot(t): return torch.cat((-t[..., t.shape[-1]//2:], t[..., :t.shape[-1]//2]), -1)
def rope_fn(q, k, pos):
    inv = 1.0 / (10000 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    f = pos[:, :, None].float() * inv
    e = torch.cat((f, f), -1); cos, sin = e.cos()[:, None], e.sin()[:, None]
    qo = q * cos + rot(q) * sin
    ko = k * cos + rot(k) * sin
    qo.mul_(0.5)  # in-place on the fused output
    return qo, ko
def qkv(x, wq, wk, wv):
    return F.linear(x, wq), F.linear(x, wk), F.linear(x, wv)
def qkv_inplace(x, wq, wk, wv):
    q, k, v = F.linear(x, wq), F.linear(x, wk), F.linear(x, wv)
    k.add_(1); q.mul_(2)
    return q, k, v
def ce(logits, labels, sm):
    return F.cross_entropy(logits.float(), labels, label_smoothing=sm, ignore_index=3)
def lce(h, w, labels):
    return F.cross_entropy((h @ w.t()).float(), labels)
def lce_logits(h, w, labels):
    logits = h @ w.t()
    loss = F.cross_entropy(logits.float().view(-1, V), labels.view(-1))
    return loss, logits
def geglu(g, u):
    y = F.gelu(g, approximate="tanh") * u
    return y, y.view(-1)[:5]
q, k = torch.randn(1, 2, 6, D, requires_grad=True), torch.randn(1, 2, 6, D, requires_grad=True)
pos = torch.arange(6)[None]
x = torch.randn(1, 1, H); wq, wk, wv = [torch.randn(n, H) for n in (32, 16, 16)]
logits = torch.randn(10, V, requires_grad=True); labels = torch.randint(0, V, (10,)); labels[2] = 3
h = torch.randn(10, H, requires_grad=True); w = (0.2 * torch.randn(V, H)).requires_grad_()
g, u = torch.randn(3, H, requires_grad=True), torch.randn(3, H, requires_grad=True)
for t in ["torch", "ttx"]:
    check(f"rope_inplace {t}", rope_fn, [q, k, pos], t)
    with torch.no_grad():
        check(f"qkv decode {t}", qkv, [x, wq, wk, wv], t, grad=False)
        check(f"qkv decode inplace {t}", qkv_inplace, [x, wq, wk, wv], t, grad=False)
        check(f"qkv decode dyn {t}", qkv, [x, wq, wk, wv], t, grad=False, dynamic=True)
    check(f"ce sm=0.1 {t}", ce, [logits, labels, 0.1], t)
    check(f"ce sm=0.1 dyn {t}", ce, [logits, labels, 0.1], t, dynamic=True)
    check(f"lce {t}", lce, [h, w, labels], t)
    check(f"lce_logits {t}", lce_logits, [h, w, labels], t)
    check(f"lce dyn {t}", lce, [h, w, labels], t, dynamic=True)
    check(f"geglu view {t}", geglu, [g, u], t)
