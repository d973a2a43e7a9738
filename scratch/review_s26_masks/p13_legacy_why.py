"""Why the legacy mask is not a constant: the mask subgraph's nodes and the mutation check."""
from h import *
from p12_legacy_mask import legacy, x, q, k, v  # noqa
from mojo_compile.patterns import mask_analysis
from mojo_compile.canonicalize import _touched_by_mutation
orig = mask_analysis.evaluate_constant


def spy(gm, node):
    nodes = mask_analysis._ancestors(node)
    print("ancestors None?", nodes is None)
    if nodes is None:
        seen, stack = set(), [node]
        while stack:
            n = stack.pop()
            if n in seen: continue
            seen.add(n); stack.extend(n.all_input_nodes)
        for n in seen:
            print("   ", n.op, n.target, mask_analysis._mutates(n) if n.op == "call_function" else "")
    else:
        print("touched:", [n.name for n in nodes if _touched_by_mutation(n)])
        for n in nodes: print("   ", n.format_node())
    return orig(gm, node)


mask_analysis.evaluate_constant = spy
fresh()
comp(legacy)(x, q, k, v)
