"""`Reason`: why a kernel is not built or not usable, as a stable code plus a message.

One type carries the decision from the build plan through the build record to `status()`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["BUILD_CODES", "RUNTIME_CODES", "Reason"]

#: Codes the build plan gives a skipped kernel.
BUILD_CODES = (
    "sources-missing",
    "nvcc-missing",
    "cuda-mismatch",
    "arch-unsupported",
    "cuda-too-old",
    "platform-excluded",
    "not-selected",
)

#: Codes the runtime registry gives, in the order it checks them; `record-invalid` (a build
#: record that cannot be read or does not validate) precedes them all, for every kernel.
RUNTIME_CODES = (
    "not-built",
    "disabled",
    "no-cuda-torch",
    "no-device",
    "arch-mismatch",
    "cuda-mismatch",
    "torch-mismatch",
    "driver-too-old",
    "library-modified",
    "load-failed",
    "namespace-collision",
    "record-invalid",
)


@dataclass(frozen=True)
class Reason:
    """A stable machine-readable `code` and a one-line human `message`.

    `cause` is set on run-time reasons that wrap a build-time one (`not-built`).
    """

    code: str
    message: str
    cause: Reason | None = None

    def __post_init__(self) -> None:
        if self.code not in BUILD_CODES and self.code not in RUNTIME_CODES:
            raise ValueError(f"unknown reason code {self.code!r}")

    def __str__(self) -> str:
        return self.message

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.cause is not None:
            data["cause"] = self.cause.to_json()
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Reason:
        cause = data.get("cause")
        return cls(
            code=str(data["code"]),
            message=str(data["message"]),
            cause=cls.from_json(cause) if isinstance(cause, dict) else None,
        )
