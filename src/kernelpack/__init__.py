"""kernelpack: vendor, build, gate and ship CUDA kernels inside Python/PyTorch packages.

The builder. Kernel packages need only `kernelpack_runtime` at run time; the names here are
re-exported from it for code written before the split (see docs/architecture.md).
"""

from __future__ import annotations

from kernelpack_runtime._version import __version__
from kernelpack_runtime.errors import KernelUnavailableError, MissingNativeError
from kernelpack_runtime.reason import Reason

# kernelpack and kernelpack-runtime are released together, at one version (the runtime's
# `_version`, which both pyproject.toml files read).
__all__ = ["KernelUnavailableError", "MissingNativeError", "Reason", "__version__"]
