"""`addone(x)`: registered by the classic-ABI library in namespace `kpdemo_addone`."""

import torch

from . import _C  # noqa: F401  (loading the library registers the ops)

__all__ = ["addone"]


def addone(x: torch.Tensor) -> torch.Tensor:
    return torch.ops.kpdemo_addone.addone(x)
