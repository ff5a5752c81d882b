"""The errors a kernel package meets at run time, and the base every kernelpack error shares.

The builder's errors (`kernelpack.errors`) derive from `KernelpackError` here, so one
`exit_code` convention covers both distributions: 2 for bad input, 1 for a failure of the
thing checked or built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernelpack_runtime.reason import Reason

__all__ = ["KernelUnavailableError", "KernelpackError", "MissingNativeError", "UsageError"]


class KernelpackError(Exception):
    """Base of kernelpack's errors; `str()` is a one-line message fit for a terminal."""

    exit_code: int = 1


class UsageError(KernelpackError):
    """Bad input on the command line or in the environment (exit code 2)."""

    exit_code = 2


class KernelUnavailableError(RuntimeError):
    """`load()` of a kernel that cannot be used here; carries `.kernel` and `.reason`."""

    def __init__(self, kernel: str, reason: Reason) -> None:
        self.kernel = kernel
        self.reason = reason
        super().__init__(f"kernel {kernel!r} is unavailable ({reason.code}): {reason.message}")


class MissingNativeError(ImportError):
    """A stubbed native module (see `kernelpack_runtime.stubs`) was used; carries the original
    error."""

    def __init__(self, module: str, original: BaseException | None) -> None:
        self.module = module
        self.original = original
        detail = f": {type(original).__name__}: {original}" if original is not None else ""
        super().__init__(f"native module {module!r} is not available{detail}", name=module)
