from harness import *
torch.manual_seed(0)
B,H,S,D=2,4,6,8
def rh(x):
    h=x.shape[-1]//2; return torch.cat((-x[..., h:], x[..., :h]), -1)
def rope(q,k,cos,sin):
    c,s=cos.unsqueeze(1),sin.unsqueeze(1)
    return q*c+rh(q)*s, k*c+rh(k)*s
def sdpa_vT(q,k,vT): return F.scaled_dot_product_attention(q,k,vT.transpose(2,3),is_causal=True)
def sdpa_allT(qT,kT,vT): return F.scaled_dot_product_attention(qT.transpose(2,3),kT.transpose(2,3),vT.transpose(2,3),is_causal=True)
def sdpa_allT_nc(qT,kT,vT): return F.scaled_dot_product_attention(qT.transpose(2,3),kT.transpose(2,3),vT.transpose(2,3))
def sdpa_vT_eager(q,k,vT):
    w=torch.matmul(q,k.transpose(2,3))*0.3
    return torch.matmul(F.softmax(w,dim=-1,dtype=torch.float32),vT.transpose(2,3))
def rope_sdpa(q,k,v,cos,sin):
    q,k=rope(q,k,cos,sin); return F.scaled_dot_product_attention(q,k,v,is_causal=True)
q,k=torch.randn(B,H,S,D),torch.randn(B,H,S,D); vT=torch.randn(B,H,D,S)
probe("sdpa v transposed", sdpa_vT, q,k,vT)
probe("sdpa all transposed", sdpa_allT, torch.randn(B,H,D,S),torch.randn(B,H,D,S),vT)
probe("sdpa all transposed noncausal", sdpa_allT_nc, torch.randn(B,H,D,S),torch.randn(B,H,D,S),vT)
probe("eager v transposed", sdpa_vT_eager, q,k,vT)
probe("sdpa v transposed inductor", sdpa_vT, q,k,vT, inner="inductor")
probe("sdpa v transposed ttx", sdpa_vT, q,k,vT, target="ttx")
def sdpa_v_permuted(q,k,x):  # v = x.permute(0,2,1,3) -- BSHD -> BHSD (the common case)
    return F.scaled_dot_product_attention(q,k,x.permute(0,2,1,3),is_causal=True)
probe("sdpa v from bshd", sdpa_v_permuted, q,k,torch.randn(B,S,H,D))
