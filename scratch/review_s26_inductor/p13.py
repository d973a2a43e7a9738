from h import *
import torch.nn.functional as F
torch.manual_seed(0)
H, I = 16, 24
def mlp_mut_gate_input(g, u, wd):
    h = F.silu(g) * u
    out = h @ wd
    g.mul_(2)
    return out
def mlp_mut_up_input(g, u, wd):
    h = F.silu(g) * u
    out = h @ wd
    u.add_(1)
    return out
def mlp_from_x_mut_x(x, wg, wu, wd):
    h = F.silu(x @ wg) * (x @ wu)
    out = h @ wd
    x.mul_(2)
    return out
g = torch.randn(2, 5, I); u = torch.randn(2, 5, I); wd = (0.2 * torch.randn(I, H)).requires_grad_()
x = torch.randn(2, 5, H); wg, wu = (0.2 * torch.randn(H, I)).requires_grad_(), (0.2 * torch.randn(H, I)).requires_grad_()
versus("mlp_mut_gate_input", mlp_mut_gate_input, [g, u, wd])
versus("mlp_mut_up_input", mlp_mut_up_input, [g, u, wd])
versus("mlp_from_x_mut_x", mlp_from_x_mut_x, [x, wg, wu, wd])
