"""Target `torch_npu`: Ascend's fused ops (docs/seed-contracts.md). Each op's mapping is registered by its own
module (ops/*.py); this table loads only where torch_npu imports; asking for this target elsewhere is a clear error
(backend.resolve_target)."""
from __future__ import annotations

import torch_npu  # noqa: F401  (an ImportError marks the target unavailable, with this reason)

from .table import Table

TABLE = Table("torch_npu")  # filled by the ops' modules (lowering.register_impl)
