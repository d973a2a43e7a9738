"""Run the interpreter with the launch plans a GPU / Ascend would get: the kernel modules' planning calls of
interpreting() answer False (so GPU block sizes, grids and per-program row counts are chosen), while the INTERPRET
constexpr the kernels get stays True; device_caps is the assumed device's."""
import linecache
import sys

from kh import *  # noqa
from mojo_compile.kernels import attention, attention_decode, cross_entropy, gated_act, layer_norm, linear, rms_norm, rope
from mojo_compile.kernels import common
from mojo_compile.lowering import devices


def planning_interpreting():
    f = sys._getframe(1)
    line = linecache.getline(f.f_code.co_filename, f.f_lineno)
    return "INTERPRET" in line or "dot_precision" in line


for m in (attention, attention_decode, cross_entropy, gated_act, layer_norm, linear, rms_norm, rope):
    m.interpreting = planning_interpreting

DEVICE = sys.argv[1] if len(sys.argv) > 1 else "H200"
caps = devices.DEVICES[DEVICE]
if caps.persistent:  # fewer cores so that the persistent loops iterate on small tests
    import dataclasses
    caps = dataclasses.replace(caps, vector_cores=3, matrix_cores=2)
devices._ASSUMED.append(caps)
print("planning for", caps.name, caps.persistent, caps.vector_gathers)
