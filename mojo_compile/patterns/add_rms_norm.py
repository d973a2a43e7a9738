"""Residual add + RMSNorm -> `mojo::add_rms_norm`, the Mojo Opset "pre" contract: (normalised sum, sum).

Every RMSNorm spelling of rms_norm.py behind `x + residual`. The sum is the pattern's second output, so where the
model also uses it (as the next residual) that use reads the op's second output; the final norm, whose sum has no
other use, fuses the same way. Registered at a higher priority than the plain norms, which are a subset.
"""
from .rms_norm import register_spellings

register_spellings(residual=True)
