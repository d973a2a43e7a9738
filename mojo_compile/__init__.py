"""mojo_compile: `torch.compile(model, backend="mojo")` rewrites LLM hot spots into fused Mojo ops.

    import torch, mojo_compile                      # the import is optional once the package is installed
    model = torch.compile(model, backend="mojo")    # options={"target": "ttx" | "torch_npu" | "torch", ...}
    model(inputs)
    print(mojo_compile.last_report())               # what was fused, where, and on which target
    print(mojo_compile.verify(model, inputs).table())   # each fused site and graph against eager

Add a fusion -- its op, implementations and patterns in one module of your own -- with `register_impl` and
`register_pattern` (docs/adding-a-fusion.md; examples/relu_squared_fusion.py).
"""
from . import logs  # noqa: F401  (first: registers TORCH_LOGS="mojo" before torch reads TORCH_LOGS)
from . import ops  # noqa: F401  (registers torch.ops.mojo.*)
from .backend import mojo_backend
from .debug import bisect, diff, explain, verify
from .lowering import register_impl, register_target
from .options import OptionError, Options
from .patterns import (Pattern, PatternError, refuse, register_graph_pass, register_pattern, registered_patterns,
                       unregister_pattern)
from .report import Report, last_report, reset_report

__version__ = "0.1.0"
__all__ = ["mojo_backend", "register_pattern", "unregister_pattern", "registered_patterns", "register_graph_pass",
           "register_target",
           "register_impl",
           "last_report", "reset_report", "Report", "Pattern", "PatternError", "Options", "OptionError", "verify",
           "bisect", "diff", "explain", "refuse"]
