"""A couple of sliding-window cases under the default Inductor inner compiler."""
from h import *
torch.manual_seed(1)
S = 9
ids = torch.randint(3, 128, (3, S))
left = torch.ones(3, S, dtype=torch.long); left[1, :3] = 0; left[2, :6] = 0
right = torch.ones(3, S, dtype=torch.long); right[1, -3:] = 0; right[2, -6:] = 0
forward_case("mistral", "sdpa", left, ids, "torch", "inductor", label="left")
forward_case("gemma3", "sdpa", right, ids, "torch", "inductor", label="right")
forward_case("gemma2", "eager", None, ids, "torch", "inductor", label="nopad")
