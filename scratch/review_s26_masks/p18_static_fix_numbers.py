"""p4_generate (StaticCache, padded batch) with the p17 fix patched in: the tokens and per-step logits stay eager's."""
from h import *
import inspect, sys
from mojo_compile.patterns import mask_algebra
src = inspect.getsource(mask_algebra.evaluate)
src = src.replace('if a.op == "placeholder" and isinstance(a.meta.get("val"), torch.SymInt):',
                  'if isinstance(a.meta.get("val"), torch.SymInt):')
src = src.replace('if isinstance(a, Node) and a.op == "placeholder" and isinstance(a.meta.get("val"), torch.SymInt):',
                  'if isinstance(a, Node) and isinstance(a.meta.get("val"), torch.SymInt):')
exec(compile(src, mask_algebra.__file__, "exec"), mask_algebra.__dict__)
sys.argv = ["p4_generate.py"] + sys.argv[1:]
exec(open("p4_generate.py").read())
