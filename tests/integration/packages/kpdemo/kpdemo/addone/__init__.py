"""`addone(x)`: registered by the classic-ABI library in namespace `kpdemo_addone`."""

import torch

from . import _C

__all__ = ["addone"]


def addone(x: torch.Tensor) -> torch.Tensor:
    return torch.ops.kpdemo_addone.addone(x)
