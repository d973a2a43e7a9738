"""The Mojo ops: functional torch.library custom ops in the `mojo` namespace (torch.ops.mojo.*)."""
from . import attention, cross_entropy, gated_act, linear_cross_entropy, rms_norm, rope  # noqa: F401  (registers the ops)
