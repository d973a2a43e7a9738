"""Why the StaticCache decode mask (HF llama, padded) stays a tensor: the formula and the structure search."""
from h import *
from mojo_compile.patterns import mask_algebra, mask_analysis
orig_eval, orig_struct = mask_algebra.evaluate, mask_algebra.structure


def ev(mask, reader=None, writes=None):
    r = orig_eval(mask, reader, writes)
    print("FORMULA", None if r is None else (r.expr, r.shape))
    if r is None:  # walk to the first node whose rule gives None
        def walk(n, depth=0):
            for a in n.all_input_nodes:
                walk(a, depth + 1)
            if depth < 30:
                pass
        seen = []
        stack = [mask]
        while stack:
            n = stack.pop()
            if n in seen: continue
            seen.append(n); stack.extend(n.all_input_nodes)
        print("   targets:", sorted({str(n.target) for n in seen if n.op == "call_function"}))
        print("   placeholders:", [(n.name, n.meta.get("val").dtype if hasattr(n.meta.get("val"), "dtype") else n.meta.get("val")) for n in seen if n.op == "placeholder"])
    return r


def st(formula, sq, skv, batch=None):
    r = orig_struct(formula, sq, skv, batch)
    print("STRUCTURE", r, "sq", sq, "skv", skv)
    return r


mask_algebra.evaluate, mask_algebra.structure = ev, st
exec(open("p15_static_decode_sites.py").read().replace("import sys\nfam = sys.argv[1]", "fam = 'llama'"))
