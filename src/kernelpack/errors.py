"""Every error kernelpack raises, in one place.

The CLI maps `KernelpackError.exit_code` to its exit status and prints `str(error)` as one
line, with no traceback: 2 for bad input, 1 for a failure of the thing checked or built.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence

from kernelpack_runtime.errors import (
    KernelpackError,
    KernelUnavailableError,
    MissingNativeError,
    UsageError,
)

__all__ = [
    "ArchiveError",
    "BuildError",
    "DownloadError",
    "Interrupted",
    "KernelUnavailableError",
    "KernelpackError",
    "ManifestError",
    "ManifestErrors",
    "MissingNativeError",
    "PlanError",
    "SelectionError",
    "UsageError",
]


class ManifestError(UsageError):
    """A `kernels.toml` (or `[tool.kernelpack]`) that is not valid.

    The message is `<path>: [<kernel>].<key>: <what is wrong>; <what is expected>`, always
    one line: control characters in any part (a newline in a value) are written escaped.
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
        self.path = _one_line(str(path))
        self.kernel = None if kernel is None else _one_line(kernel)
        self.key = None if key is None else _one_line(key)
        self.problem = _one_line(problem)
        self.expected = None if expected is None else _one_line(expected)
        where = ""
        if self.kernel is not None:
            where = f"[{self.kernel}]"
            if self.key is not None:
                where += f".{self.key}"
        elif self.key is not None:
            where = self.key
        message = f"{self.path}: "
        if where:
            message += f"{where}: "
        message += self.problem
        if self.expected:
            message += f"; {self.expected}"
        super().__init__(message)

    def lines(self, limit: int = 20) -> list[str]:
        """Every problem, one line each (at most `limit`, then "… and N more")."""
        del limit
        return [str(self)]


class ManifestErrors(ManifestError):
    """Several problems in one manifest, in the order they appear in the file.

    Reads as the first problem (with a count of the others), so code and verbs that report
    one line keep working; `lines()` gives them all, as `kernelpack check` prints them.
    """

    def __init__(self, errors: Sequence[ManifestError]) -> None:
        if not errors:
            raise ValueError("ManifestErrors needs at least one error")
        first = errors[0]
        super().__init__(
            first.path, first.problem, kernel=first.kernel, key=first.key, expected=first.expected
        )
        self.errors = tuple(errors)
        if len(errors) > 1:
            more = len(errors) - 1
            self.args = (f"{self.args[0]} (and {more} more; kernelpack check lists them)",)

    def lines(self, limit: int = 20) -> list[str]:
        shown = [line for error in self.errors[:limit] for line in error.lines(1)]
        if len(self.errors) > limit:
            shown.append(f"… and {len(self.errors) - limit} more")
        return shown


def _one_line(text: str) -> str:
    """`text` with every control or line-breaking character escaped (`\\n`, `\\x00`)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


class PlanError(KernelpackError):
    """The build plan cannot be honoured (a required kernel is skipped, an impossible setting)."""

    exit_code = 2


class SelectionError(PlanError):
    """A selection variable leaves out a kernel a release build requires (exit code 1)."""

    exit_code = 1


class BuildError(KernelpackError):
    """A compile, link or packaging step failed (exit code 1)."""

    exit_code = 1


class ArchiveError(UsageError):
    """A dependency's archive kernelpack refuses to unpack: its sha256 is not the one
    kernelpack's table holds, or a member would land outside its folder (exit code 2)."""


class DownloadError(UsageError):
    """A dependency's archive could not be read from where it was looked for (exit code 2)."""


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
