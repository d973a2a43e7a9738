"""Target `torch_npu`: Ascend's fused ops (docs/seed-contracts.md). The table loads only where
torch_npu imports; asking for this target elsewhere is a clear error (backend.resolve_target).

Backward ops have no entry here: they run on the torch reference (logged once). The cross-entropy loss and its
backward are listed with the torch reference as their implementation (no torch_npu op is mapped yet). None of
this has run on an NPU here; tests/test_npu.py checks every mapping against stand-ins that implement the
documented semantics.
"""
from __future__ import annotations


import torch
import torch_npu  # noqa: F401  (an ImportError marks the target unavailable, with this reason)

from . import reference
from .table import Table

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
TABLE = Table("torch_npu")  # each op's entry registered below its implementation


def _npu_tensors(logits, *rest):
    return None if logits.device.type == "npu" else f"torch_npu runs on npu tensors, not {logits.device.type}"


# The losses run the torch reference (fp32 per chunk of rows, dlogits in the logits' dtype): no torch_npu op is
# mapped to it yet. Registered so that the report names torch_npu, not a fallback.
for _op, _inputs_of in (("linear_cross_entropy", lambda hidden, *rest: hidden),
                        ("linear_cross_entropy_backward", lambda grad_loss, grad_lse, hidden, *rest: hidden)):
    TABLE.implement(_op, reference.TABLE[_op].fn, supports=lambda *args, _of=_inputs_of: _npu_tensors(_of(*args)),
                    traceable=reference.TABLE[_op].traceable)
