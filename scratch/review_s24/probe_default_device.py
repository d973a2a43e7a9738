"""Under torch.set_default_device(DEV) before the built-ins load (they load at the first compile), the example inputs
are made on DEV: which entries / summaries would differ from the shipped ones?"""
import sys, json
import conftest  # noqa
import torch
dev = sys.argv[1]
torch.set_default_device(dev)
from mojo_compile import patterns, pattern_cache
patterns.load_fusions()
torch.set_default_device(None)
devs = set()
for p in patterns.registered_patterns():
    if p.builtin:
        for inputs in p.example_inputs:
            devs |= {str(t.device) for t in inputs if isinstance(t, torch.Tensor)}
print("example input devices:", devs)
shipped = pattern_cache._shipped()
print("shipped read:", shipped is not None)
n_ship = [0]
real = pattern_cache._shipped_trace
pattern_cache._shipped_trace = lambda parts: (n_ship.__setitem__(0, n_ship[0] + 1) or real(parts))
# register every set (no gating), compare summaries with the shipped ones
pattern_cache._SUMMARIES.clear()
import os
os.environ["MOJO_PATTERN_CACHE"] = "0"
for p in patterns.registered_patterns():
    if p.builtin:
        patterns._compile(p)
fp = pattern_cache._rules_fingerprint()
ship_s = shipped["summaries"][fp]
diff = []
for p in patterns.registered_patterns():
    if p.builtin:
        mine = [[sorted(i.targets), i.size] for i in p._sets]
        if ship_s.get(p.name) != mine:
            diff.append((p.name, ship_s.get(p.name), mine))
print("summaries differing:", len(diff))
for d in diff[:5]:
    print(d)
