from harness import *
import functools
torch.manual_seed(0)
B,H,Hk,S,D=2,4,2,6,8
q=torch.randn(B,H,S,D)*4
def sdpa(q,k,v,scale=None,causal=False, gqa=False):
    return F.scaled_dot_product_attention(q,k,v,is_causal=causal,scale=scale,enable_gqa=gqa)
r=probe("sdpa scale -1 causal", functools.partial(sdpa, scale=-1.0, causal=True), q,q,q)
print(r[0].isnan().sum(), r[1].isnan().sum(), r[0].isinf().sum(), r[1].isinf().sum(), (r[0]-r[1]).abs().max())
def repeat_kv(x,n):
    b,h,s,d=x.shape; return x[:,:,None].expand(b,h,n,s,d).reshape(b,h*n,s,d)
class M(torch.nn.Module):
    def forward(self,q,k,v,mask):
        w=torch.matmul(q,k.transpose(2,3))*0.35+mask
        w=F.softmax(w,dim=-1,dtype=torch.float32).to(q.dtype)
        w=F.dropout(w,p=0.5,training=self.training)
        return torch.matmul(w,v)
k=torch.randn(B,H,S,D); v=torch.randn(B,H,S,D); mask=torch.zeros(B,1,S,S)
m=M().train()
torch.manual_seed(1); probe("dropout train", m, q,k,v,mask)
m.eval(); probe("dropout eval", m, q,k,v,mask)
def sdpa_drop(q,k,v): return F.scaled_dot_product_attention(q,k,v,dropout_p=0.3)
probe("sdpa dropout", sdpa_drop, q,k,v)
