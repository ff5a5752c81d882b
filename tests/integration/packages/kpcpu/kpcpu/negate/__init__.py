"""`negate_(x)`: x = -x in place, registered by the CPU library in the recorded namespace."""

import torch

from kernelpack_runtime import ops_namespace

from . import _C  # noqa: F401  (loading the library registers the ops)

__all__ = ["NAMESPACE", "negate_"]

#: The torch.ops namespace of these ops, from the build record.
NAMESPACE = ops_namespace(__name__)


def negate_(x: torch.Tensor) -> torch.Tensor:
    getattr(torch.ops, NAMESPACE).negate_(x)
    return x
