from harness import *
torch.manual_seed(0)
B,H,S,D=2,4,6,8
q,k,v=(torch.randn(B,H,S,D)*3 for _ in range(3))
i=torch.arange(S); mask=torch.where(i[None,:]<=i[:,None],0.0,-1e4)[None,None].expand(B,1,S,S).contiguous()
def dim2(q,k,v,mask):
    w=torch.matmul(q,k.transpose(2,3))*0.3+mask
    return torch.matmul(F.softmax(w,dim=-2,dtype=torch.float32),v)
def mask_before_cap(q,k,v,mask):
    w=torch.matmul(q,k.transpose(2,3))*0.3+mask
    w=torch.tanh(w/5.0)*5.0
    return torch.matmul(F.softmax(w,dim=-1,dtype=torch.float32),v)
def cap_then_scale(q,k,v,mask):
    w=torch.matmul(q,k.transpose(2,3))
    w=torch.tanh(w/5.0)*5.0*0.3+mask
    return torch.matmul(F.softmax(w,dim=-1,dtype=torch.float32),v)
def cap_tanh_mul_order(q,k,v,mask):
    w=torch.matmul(q,k.transpose(2,3))*0.3
    w=5.0*torch.tanh(w*0.2)+mask
    return torch.matmul(F.softmax(w,dim=-1,dtype=torch.float32),v)
def cap_diff_consts(q,k,v,mask):
    w=torch.matmul(q,k.transpose(2,3))*0.3
    w=torch.tanh(w/5.0)*4.0+mask
    return torch.matmul(F.softmax(w,dim=-1,dtype=torch.float32),v)
def mT(q,k,v,mask):
    w=(q@k.mT)*0.3+mask
    return F.softmax(w,dim=-1)@v
def scale_div(q,k,v,mask):
    w=(q@k.transpose(-1,-2))/ (D**0.5)+mask
    return F.softmax(w,dim=-1)@v
def log_softmax_attn(q,k,v,mask):
    w=(q@k.transpose(-1,-2))*0.3+mask
    return F.log_softmax(w,dim=-1)@v
def v_transposed(q,k,v,mask):
    w=(q@k.transpose(-1,-2))*0.3+mask
    return F.softmax(w,dim=-1)@v.transpose(2,3)
def k_not_transposed(q,k,v,mask):
    w=(q@k)*0.3+mask
    return F.softmax(w,dim=-1)@v
def softmax_half(q,k,v,mask):
    w=(q@k.transpose(-1,-2))*0.3+mask
    return F.softmax(w.half(),dim=-1).float()@v
def mask_mul(q,k,v,mask):
    w=(q@k.transpose(-1,-2))*0.3*mask
    return F.softmax(w,dim=-1)@v
def mask_sub(q,k,v,mask):
    w=(q@k.transpose(-1,-2))*0.3-mask
    return F.softmax(w,dim=-1)@v
def mask_times2(q,k,v,mask):
    w=(q@k.transpose(-1,-2))*0.3+mask*2
    return F.softmax(w,dim=-1)@v
def sdpa_then_extra(q,k,v,mask):
    return F.scaled_dot_product_attention(q,k,v,attn_mask=mask, scale=0.3)
for f in (dim2, mask_before_cap, cap_then_scale, cap_tanh_mul_order, cap_diff_consts, mT, scale_div, log_softmax_attn, v_transposed, k_not_transposed, softmax_half, mask_mul, mask_sub, mask_times2, sdpa_then_extra):
    probe(f.__name__, f, q,k,v,mask)
