"""`scale(x, factor)`: registered by the stable-ABI library in namespace `kpdemo_scale`."""

import torch

from . import _C

__all__ = ["scale"]


def scale(x: torch.Tensor, factor: float) -> torch.Tensor:
    return torch.ops.kpdemo_scale.scale(x, factor)
