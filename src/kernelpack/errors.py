"""Every error kernelpack raises, in one place.

The CLI maps `KernelpackError.exit_code` to its exit status and prints `str(error)` as one
line, with no traceback: 2 for bad input, 1 for a failure of the thing checked or built.
"""

from __future__ import annotations

import signal

from kernelpack_runtime.errors import (
    KernelpackError,
    KernelUnavailableError,
    MissingNativeError,
    UsageError,
)

__all__ = [
    "BuildError",
    "Interrupted",
    "KernelUnavailableError",
    "KernelpackError",
    "ManifestError",
    "MissingNativeError",
    "PlanError",
    "UsageError",
]


class ManifestError(UsageError):
    """A `kernels.toml` (or `[tool.kernelpack]`) that is not valid.

    The message is `<path>: [<kernel>].<key>: <what is wrong>; <what is expected>`.
    """

    def __init__(
        self,
        path: object,
        problem: str,
        *,
        kernel: str | None = None,
        key: str | None = None,
        expected: str | None = None,
    ) -> None:
        self.path = str(path)
        self.kernel = kernel
        self.key = key
        self.problem = problem
        self.expected = expected
        where = ""
        if kernel is not None:
            where = f"[{kernel}]"
            if key is not None:
                where += f".{key}"
        elif key is not None:
            where = key
        message = f"{self.path}: "
        if where:
            message += f"{where}: "
        message += problem
        if expected:
            message += f"; {expected}"
        super().__init__(message)


class PlanError(KernelpackError):
    """The build plan cannot be honoured (a required kernel is skipped, an impossible setting)."""

    exit_code = 2


class BuildError(KernelpackError):
    """A compile, link or packaging step failed (exit code 1)."""

    exit_code = 1


class Interrupted(KeyboardInterrupt):
    """The run was stopped by a signal (SIGTERM, SIGHUP; SIGINT stays `KeyboardInterrupt`).

    A `KeyboardInterrupt`, so every clean-up that handles Ctrl-C handles it too; the CLI
    exits with `exit_code`, 128 + the signal number (143 for SIGTERM).
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum
