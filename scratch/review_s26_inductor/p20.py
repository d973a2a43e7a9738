from h import *
torch.manual_seed(0)
D = 16
def rot(t): return torch.cat((-t[..., t.shape[-1]//2:], t[..., :t.shape[-1]//2]), -1)
def mk(inplace):
    def rope_fn(q, k, pos):
        inv = 1.0 / (10000 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
        f = pos[:, :, None].float() * inv
        e = torch.cat((f, f), -1); cos, sin = e.cos()[:, None], e.sin()[:, None]
        qo = q * cos + rot(q) * sin
        ko = k * cos + rot(k) * sin
        if inplace: qo.mul_(0.5)
        return qo, ko
    return rope_fn
q, k = torch.randn(1, 2, 6, D, requires_grad=True), torch.randn(1, 2, 6, D, requires_grad=True)
pos = torch.arange(6)[None]
for ip in [False, True]:
    check(f"rope inplace={ip}", mk(ip), [q, k, pos], "torch", options={"inner_compiler": "eager"})
    for g in mojo_compile.last_report().graphs: print(g.notes)
