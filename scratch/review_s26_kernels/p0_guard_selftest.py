from kh import *
import triton, triton.language as tl

@triton.jit
def k(Y, N):
    i = tl.arange(0, 8)
    tl.store(Y + i, 1.0, mask=i < N + 1)   # one past the end

try:
    with guarded():
        y = torch.empty(4)
        k[(1,)](y, 4)
    print("NOT DETECTED")
except AssertionError as e:
    print("detected:", e)
