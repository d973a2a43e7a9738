"""Simulated fix for the StaticCache decode mask: a SymInt computed in the graph (`sub` of sizes) is a size, read
through its users' meta, as a SymInt placeholder already is. Patched source of mask_algebra.evaluate, then p15."""
from h import *
import inspect
from mojo_compile.patterns import mask_algebra
src = inspect.getsource(mask_algebra.evaluate)
old = 'if a.op == "placeholder" and isinstance(a.meta.get("val"), torch.SymInt):'
assert src.count(old) == 1
src = src.replace(old, 'if isinstance(a.meta.get("val"), torch.SymInt):')
src = src.replace('if isinstance(a, Node) and a.op == "placeholder" and isinstance(a.meta.get("val"), torch.SymInt):',
                  'if isinstance(a, Node) and isinstance(a.meta.get("val"), torch.SymInt):')
exec(compile(src, mask_algebra.__file__, "exec"), mask_algebra.__dict__)
import sys
exec(open("p15_static_decode_sites.py").read().replace("import sys\nfam = sys.argv[1]", f"fam = '{sys.argv[1]}'"))
