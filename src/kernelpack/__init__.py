"""kernelpack: vendor, build, gate and ship CUDA kernels inside Python/PyTorch packages.

The top-level package stays light: it is imported by kernel packages at run time.
"""

from __future__ import annotations

from kernelpack.errors import KernelUnavailableError, MissingNativeError
from kernelpack.reason import Reason

__all__ = ["KernelUnavailableError", "MissingNativeError", "Reason", "__version__"]

__version__ = "0.1.0"
