import sys, traceback
from h import *
import torch._subclasses.fake_impls as FI
orig = FI._compute_slice_index
printed = [0]
def wrapped(*a, **k):
    if any(isinstance(x, torch.SymInt) for x in a) and not printed[0]:
        printed[0] = 1
        st = traceback.extract_stack(limit=60)
        for fr in st:
            if "mojo_compile" in fr.filename or "pattern_matcher" in fr.filename or "review" in fr.filename:
                print("STK", fr.filename.split("site-packages/")[-1], fr.lineno, fr.name)
        print("ARGS", a)
    return orig(*a, **k)
FI._compute_slice_index = wrapped
sys.argv = ["p10_min.py", sys.argv[1]]
exec(open("p10_min.py").read())
