from h import *
import torch.nn.functional as F
x = torch.randn(3, 1, 1500).bfloat16(); w = torch.randn(80, 1500).bfloat16()
with torch.no_grad():
    print(run(lambda x, w: (F.linear(x, w[:37]), F.linear(x, w[37:40]), F.linear(x, w[40:])), [x, w], "ttx"))
    print(mojo_compile.last_report())
