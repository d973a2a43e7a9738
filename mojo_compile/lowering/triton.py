"""Target `ttx`: Triton kernels. NVIDIA GPUs natively, Ascend through triton-ascend, CPU tensors under
TRITON_INTERPRET=1 (how CI checks the kernels). Each op's implementation is registered by its own module (ops/*.py);
this table loads only where Triton imports."""
from __future__ import annotations

import triton  # noqa: F401  (an ImportError marks the target unavailable, with this reason)

from .table import Table

TABLE = Table("ttx")  # filled by the ops' modules (lowering.register_impl)
