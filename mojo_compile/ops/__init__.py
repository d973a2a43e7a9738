"""The Mojo ops: functional torch.library custom ops in the `mojo` namespace (torch.ops.mojo.*)."""
from . import rms_norm  # noqa: F401  (registers mojo::rms_norm, mojo::add_rms_norm, mojo::rms_norm_backward)
