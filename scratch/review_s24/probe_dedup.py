"""Which built-in input sets are skipped as duplicates (pattern_pass None) when traced vs when read from the
shipped file. Usage: probe_dedup.py traced|shipped"""
import sys, os, json
import conftest  # noqa
from mojo_compile import patterns, pattern_cache
mode = sys.argv[1]
if mode == "traced":
    os.environ["MOJO_PATTERN_CACHE"] = "0"
patterns.load_fusions()
patterns.warm_cache() if mode != "traced" else [patterns._compile(p) for p in patterns.registered_patterns() if p.builtin]
out = {}
for p in patterns.registered_patterns():
    if p.builtin:
        out[p.name] = [[i.pattern_pass is None, sorted(i.targets), i.size] for i in p._sets]
print(json.dumps(out, sort_keys=True))
