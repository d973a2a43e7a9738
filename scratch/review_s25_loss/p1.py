from h import probe
import torch, torch.nn.functional as F
torch.manual_seed(0)
V = 37
BF = torch.bfloat16
def lg(*s, dtype=BF): return (torch.randn(*s)*3).to(dtype)
def lb(*s, classes=V, ign=(1,), val=-100):
    t = torch.randint(0, classes, s); t.view(-1)[list(ign)] = val; return t

probe("ign0_ls", lambda x, t: F.cross_entropy(x.float().view(-1, V), t, ignore_index=0, label_smoothing=0.2), [lg(2,5,V), lb(10, val=0)])
probe("ign_big", lambda x, t: F.cross_entropy(x.float().view(-1, V), t, ignore_index=1000), [lg(2,5,V), lb(10, val=1000)])
probe("all_ign_sum", lambda x, t: F.cross_entropy(x.float().view(-1, V), t, reduction="sum"), [lg(2,5,V), lb(10, ign=range(10))])
probe("all_ign_mean", lambda x, t: F.cross_entropy(x.float().view(-1, V), t), [lg(2,5,V), lb(10, ign=range(10))])
probe("none", lambda x, t: F.cross_entropy(x.float().view(-1, V), t, reduction="none"), [lg(2,5,V), lb(10)], grad=torch.randn(10))
probe("int32", lambda x, t: F.cross_entropy(x.float().view(-1, V), t), [lg(2,5,V), lb(10).int()])
probe("fp64_logits", lambda x, t: F.cross_entropy(x.view(-1, V), t), [lg(2,5,V, dtype=torch.float64), lb(10)])
probe("fp16", lambda x, t: F.cross_entropy(x.float().view(-1, V), t), [lg(2,5,V, dtype=torch.float16), lb(10)])
probe("labels2d", lambda x, t: F.cross_entropy(x.float().view(-1, V), t.view(-1)), [lg(2,5,V), lb(2,5)])
probe("classes_dim1", lambda x, t: F.cross_entropy(x.float().transpose(1, 2), t), [lg(2,5,V), lb(2,5)])
probe("returned", lambda x, t: (F.cross_entropy(x.float().view(-1, V), t), x), [lg(2,5,V), lb(10)])
probe("zloss", lambda x, t: F.cross_entropy(x.float().view(-1, V), t) + 1e-2 * torch.logsumexp(x.float(), -1).pow(2).mean(), [lg(2,5,V), lb(10)])
probe("one_tok", lambda x, t: F.cross_entropy(x.float().view(-1, V), t), [lg(1,1,V), lb(1, ign=())])
probe("empty", lambda x, t: F.cross_entropy(x.float().view(-1, V), t), [lg(0,5,V), lb(0, ign=())])
probe("empty_sum", lambda x, t: F.cross_entropy(x.float().view(-1, V), t, reduction="sum"), [lg(0,5,V), lb(0, ign=())])
probe("weight", lambda x, t, w: F.cross_entropy(x.float().view(-1, V), t, weight=w), [lg(2,5,V), lb(10), torch.rand(V)])
probe("ls1", lambda x, t: F.cross_entropy(x.float().view(-1, V), t, label_smoothing=1.0), [lg(2,5,V), lb(10)])
probe("ls_none_ign", lambda x, t: F.cross_entropy(x.float().view(-1, V), t, label_smoothing=0.1, reduction="none", ignore_index=3), [lg(2,5,V), lb(10, val=3)], grad=torch.randn(10))
probe("num_items_tensor", lambda x, t, n: F.cross_entropy(x.float().view(-1, V), t, reduction="sum") / n, [lg(2,5,V), lb(10), torch.tensor(7)])
probe("dyn", lambda x, t: F.cross_entropy(x.float().view(-1, V), t), [lg(2,5,V), lb(10)], dynamic=True)
probe("fp32_2d_dyn_ls", lambda x, t: F.cross_entropy(x, t, label_smoothing=0.3, ignore_index=-1), [lg(10,V,dtype=torch.float32), lb(10, val=-1)], dynamic=True)
probe("inductor", lambda x, t: F.cross_entropy(x.float().view(-1, V), t, label_smoothing=0.1), [lg(2,5,V), lb(10)], options={"inner_compiler": "inductor"})
probe("softmax_other_user", lambda x, t: (F.cross_entropy(x.float().view(-1, V), t), x.float().softmax(-1).max()), [lg(2,5,V), lb(10)])
probe("module", lambda x, t: torch.nn.CrossEntropyLoss(ignore_index=5, label_smoothing=0.05)(x.float().view(-1, V), t), [lg(2,5,V), lb(10, val=5)])
probe("nll_logsoftmax", lambda x, t: F.nll_loss(F.log_softmax(x.float().view(-1, V), -1), t), [lg(2,5,V), lb(10)])
probe("neg_ignore_label_other", lambda x, t: F.cross_entropy(x.float().view(-1, V), t, ignore_index=-1), [lg(2,5,V), lb(10, val=-1)])
