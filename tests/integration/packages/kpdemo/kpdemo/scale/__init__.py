"""`scale(x, factor)`: registered by the stable-ABI library in namespace `kpdemo_scale`."""

import torch

from . import _C  # noqa: F401  (loading the library registers the ops)

__all__ = ["scale"]


def scale(x: torch.Tensor, factor: float) -> torch.Tensor:
    return torch.ops.kpdemo_scale.scale(x, factor)
