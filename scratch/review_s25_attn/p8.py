from harness import *
import functools, logging
sys.path.insert(0, "/work/main/tests")
from test_rope import Attention, apply_partial, tables
torch.manual_seed(0)
m = Attention(apply_partial, 16, 4, "bhsd")
cos, sin = tables(2, 7, 4, torch.float32)
probe("test model partial", m, torch.randn(2, 7, 32), cos, sin)
def direct(q, k, cos, sin): return apply_partial(q, k, cos, sin)
probe("direct partial contiguous", direct, torch.randn(2, 4, 7, 16), torch.randn(2, 2, 7, 16), cos, sin)
probe("direct partial random cos", direct, torch.randn(2, 4, 7, 16), torch.randn(2, 2, 7, 16), torch.randn(2,7,4), torch.randn(2,7,4))
probe("test model partial random cos", m, torch.randn(2, 7, 32), torch.randn(2,7,4), torch.randn(2,7,4))
