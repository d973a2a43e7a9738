from harness import *
def f(q,k,v,mask):
    w=torch.matmul(q,k.transpose(2,3))*0.2; w=torch.tanh(w/7.0)*7.0+mask
    return torch.matmul(F.softmax(w,dim=-1,dtype=torch.float32).to(q.dtype),v)
torch.manual_seed(0)
for t in ("torch","ttx"):
    torch._dynamo.reset()
    q=torch.randn(1,2,1,16,requires_grad=True); k=torch.randn(1,2,1,16,requires_grad=True); v=torch.randn(1,2,1,16)
    o=torch.compile(f,backend="mojo",options={"target":t,"inner_compiler":"eager"})(q,k,v,torch.zeros(1,1,1,1))
    o.backward(torch.randn_like(o)); print(t, mojo_compile.last_report().counts(), q.grad.abs().max().item(), k.grad.abs().max().item())
