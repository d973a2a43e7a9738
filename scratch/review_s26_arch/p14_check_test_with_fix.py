"""The user-pattern test passes with the simulated fix (tracing(None) around _ops_without_backward)."""
from h import *
import mojo_compile.patterns as P
orig = P._ops_without_backward
def patched(pattern):
    with torch._guards.tracing(None):
        return orig(pattern)
P._ops_without_backward = patched
import test_findings
test_findings.test_user_pattern_slicing_by_half_the_width_compiles()
print("PASSED with fix")
