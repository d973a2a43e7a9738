from h import *
import torch.nn.functional as F
from c2 import sdpa_additive, mk_qkv_am
from mojo_compile.ops import attention as A
torch.manual_seed(0)
q, k, v, am = mk_qkv_am((2, 6))
b,s=2,6
i = torch.arange(s)
causal = (i[None, :] <= i[:, None])[None, None]
m = torch.zeros(b, 1, s, s).masked_fill(~causal, torch.finfo(q.dtype).min)
m = m.masked_fill(am[:, None, None, :] == 0, torch.finfo(q.dtype).min)
qs=[t.clone().requires_grad_() for t in (q,k,v)]
qe=[t.clone().requires_grad_() for t in (q,k,v)]
o, lse = torch.ops.mojo.attention(*qs, m, None, 8**-0.5, target="torch")
oe = F.scaled_dot_product_attention(*qe, attn_mask=m)
print(err(o, oe), lse[1,0])
g=torch.randn_like(o)
ge = torch.autograd.grad(oe, qe, g)
for a,b_ in zip(torch.autograd.grad(o, qs, g), ge): print(err(a,b_))
p,l,_ = A._attention_probs(q,k,m,None,8**-0.5,False,0,0.0,None)
print(p[1,0,:3])
out, lse = A.reference(q,k,v,m,None,8**-0.5,False,0,0.0,None)
gr = A.reference_backward(g, q,k,v,out,lse,m,None,8**-0.5,False,0,0.0,None)
for a,b_ in zip(gr[:3], ge): print("ref bw", err(a,b_))
print(gr[0][1,0,:3], ge[0][1,0,:3])
