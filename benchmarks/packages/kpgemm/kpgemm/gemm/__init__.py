"""The CUTLASS GEMM kernel's module (its library exports `kpgemm_run`)."""

from . import _C

__all__ = ["_C"]
