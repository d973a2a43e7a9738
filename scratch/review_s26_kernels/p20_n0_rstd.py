from kh import *
x0 = torch.randn(3, 0)
with guarded():
    a = mojo.rms_norm(x0, None, 1e-6, 0.0, "output", "ttx")[1]
    b = mojo.add_rms_norm(x0, x0, None, 1e-6, 0.0, "output", "ttx")[2]
    c = mojo.layer_norm(x0, None, None, 1e-5, "ttx")
print("ttx rstd", a, b, "ln mean/rstd", c[1], c[2])
print("torch rstd", mojo.rms_norm(x0, None, 1e-6, 0.0, "output", "torch")[1], mojo.layer_norm(x0, None, None, 1e-5, "torch")[1:])
