from h import probe
import torch, torch.nn.functional as F
torch.manual_seed(0)
V = 37
BF = torch.bfloat16
def f32(x): return x if x.dtype == torch.float64 else x.float()
def lg(*s, dtype=BF): return (torch.randn(*s)*3).to(dtype)
def lb(*s, classes=V, ign=(1,), val=-100):
    t = torch.randint(0, classes, s); t.view(-1)[list(ign)] = val; return t
probe("fp64_logits", lambda x, t: F.cross_entropy(x.view(-1, V), t), [lg(2,5,V, dtype=torch.float64), lb(10)])
probe("classes_dim1", lambda x, t: F.cross_entropy(f32(x).transpose(1, 2), t), [lg(2,5,V), lb(2,5)])
probe("empty", lambda x, t: F.cross_entropy(f32(x).view(-1, V), t), [lg(0,5,V), lb(0, ign=())])
probe("weight", lambda x, t, w: F.cross_entropy(f32(x).view(-1, V), t, weight=w.to(f32(x).dtype)), [lg(2,5,V), lb(10), torch.rand(V)])
probe("ls1", lambda x, t: F.cross_entropy(f32(x).view(-1, V), t, label_smoothing=1.0), [lg(2,5,V), lb(10)])
probe("ls_none_ign", lambda x, t: F.cross_entropy(f32(x).view(-1, V), t, label_smoothing=0.1, reduction="none", ignore_index=3), [lg(2,5,V), lb(10, val=3)], grad=torch.randn(10))
probe("num_items_tensor", lambda x, t, n: F.cross_entropy(f32(x).view(-1, V), t, reduction="sum") / n, [lg(2,5,V), lb(10), torch.tensor(7)])
probe("dyn", lambda x, t: F.cross_entropy(f32(x).view(-1, V), t), [lg(2,5,V), lb(10)], dynamic=True)
probe("fp32_2d_dyn_ls", lambda x, t: F.cross_entropy(x, t, label_smoothing=0.3, ignore_index=-1), [lg(10,V,dtype=torch.float32), lb(10, val=-1)], dynamic=True)
probe("inductor", lambda x, t: F.cross_entropy(f32(x).view(-1, V), t, label_smoothing=0.1), [lg(2,5,V), lb(10)], options={"inner_compiler": "inductor"})
probe("softmax_other_user", lambda x, t: (F.cross_entropy(f32(x).view(-1, V), t), f32(x).softmax(-1).max()), [lg(2,5,V), lb(10)])
probe("module", lambda x, t: torch.nn.CrossEntropyLoss(ignore_index=5, label_smoothing=0.05)(f32(x).view(-1, V), t), [lg(2,5,V), lb(10, val=5)])
probe("nll_logsoftmax", lambda x, t: F.nll_loss(F.log_softmax(f32(x).view(-1, V), -1), t), [lg(2,5,V), lb(10)])
probe("neg_ignore_label_other", lambda x, t: F.cross_entropy(f32(x).view(-1, V), t, ignore_index=-1), [lg(2,5,V), lb(10, val=-1)])
probe("bf16_to_bf16_first", lambda x, t: F.cross_entropy(f32(x.to(BF)).view(-1, V), t), [lg(2,5,V, dtype=torch.float32), lb(10)])
probe("nograd", lambda x, t: F.cross_entropy(f32(x).view(-1, V), t), [lg(2,5,V), lb(10)], wrt=())
probe("autocast", lambda x, t, w: torch.autocast("cpu", torch.bfloat16)(lambda: F.cross_entropy((x @ w).view(-1, V), t))(), [lg(2,5,8,dtype=torch.float32), lb(10), torch.randn(8, V)], wrt=(0,2))
probe("ls_inf", lambda x, t: F.cross_entropy(f32(x).view(-1, V), t, label_smoothing=0.1), [lg(2,5,V).index_fill(2, torch.tensor([3]), float('-inf')), lb(10)])
probe("neg_inf_masked_vocab", lambda x, t: F.cross_entropy(f32(x).view(-1, V), t), [lg(2,5,V).index_fill(2, torch.tensor([3]), float('-inf')), lb(10)])
probe("ignore_index_bool", lambda x, t: F.cross_entropy(f32(x).view(-1, V), t, ignore_index=True), [lg(2,5,V), lb(10, val=1)])
probe("label_smoothing_int1", lambda x, t: F.cross_entropy(f32(x).view(-1, V), t, label_smoothing=1), [lg(2,5,V), lb(10)])
probe("uint8 labels", lambda x, t: F.cross_entropy(f32(x).view(-1, V), t), [lg(2,5,V), lb(10, ign=()).to(torch.uint8)])
