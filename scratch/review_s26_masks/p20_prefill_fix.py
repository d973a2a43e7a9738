"""Simulated fix for the StaticCache prefill mask (Sq < Skv, top-left causal, padded): a causal mask at the query
positions P(i) = i + c (no runtime tensor) is causal at q_pos = arange(Sq) + c. Patched structure and
_position_candidates, then p19 with padding."""
from h import *
import inspect, sys
from mojo_compile.patterns import mask_algebra
src = inspect.getsource(mask_algebra.structure)
old = """        if not same_size(sq, skv):
            return None
"""
assert src.count(old) == 1
src = src.replace(old, """        if not same_size(sq, skv):
            return _at_positions(expr, core, i, j, keys, padding)
""")
src += '''

def _at_positions(expr, core, i, j, keys, padding):
    for positions in _position_candidates(core, i, j, index_only=True):
        candidates = [(0, sympy.Le(j, positions))]
        candidates += [(w, sympy.And(sympy.Gt(j, positions - w), sympy.Le(j, positions)))
                       for w in _window_candidates(core, i, j, positions)]
        for window, allowed in candidates:
            if equivalent(expr, sympy.And(allowed, padding)):
                return True, window, keys, positions
    return None
'''
exec(compile(src, mask_algebra.__file__, "exec"), mask_algebra.__dict__)
src = inspect.getsource(mask_algebra._position_candidates)
src = src.replace("def _position_candidates(core, i, j) -> list:", "def _position_candidates(core, i, j, index_only=False) -> list:")
src = src.replace("bound.atoms(AppliedUndef) and", "(index_only or bound.atoms(AppliedUndef)) and")
exec(compile(src, mask_algebra.__file__, "exec"), mask_algebra.__dict__)
sys.argv = ["p19"] + sys.argv[1:]
exec(open("p19_static_variants.py").read())
