import re, sys, textwrap
sys.path[:0] = ["/work/main/tests", "/work/main", "/work/main/scratch/review_s23"]
import test_findings as T
fix1 = """
import contextlib
_TL = threading.local()
@contextlib.contextmanager
def compiling():
    _TL.running = getattr(_TL, "running", 0) + 1
    try:
        yield
    finally:
        _TL.running -= 1
        P._COMPILES["done"] += 1
def registry_changed(what):
    if P._COMPILES["done"] and not getattr(_TL, "running", 0):
        torch._dynamo.reset()
P.compiling = compiling
P.registry_changed = registry_changed
"""
fix34 = "\nP._no_backward = lambda pattern, match: None\n"
import inspect
for name, fix in [("test_a_pattern_registered_on_another_thread_during_a_compile_reaches_code_compiled_before", fix1),
                  ("test_an_op_with_a_per_backend_autograd_kernel_is_fused_for_training", fix34),
                  ("test_a_site_computed_under_no_grad_inside_a_training_step_is_fused", fix34)]:
    src = inspect.getsource(getattr(T, name))
    body = re.search(r'body = """(.*?)"""', src, re.S).group(1)
    out = T._run_fresh(fix + textwrap.dedent(body))
    print(name, out)
