"""`AbiTag`: the ABI a kernel wheel's local version names (`cu130torch2.14.1`, `cu130stable2.10`).

The plan makes it (`BuildPlan.abi_tag`), the wheel's version carries its `str()`, and release
tooling parses it back from wheel file names and pinned URLs to tell which torch a wheel
imports under: one type for both directions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

__all__ = ["AbiTag", "InvalidAbiTag"]

# The label's structure is kernelpack's own; the versions inside are parsed by packaging.
_LABEL = re.compile(r"(?P<cuda>cu\d{2,4}|cpu)(?P<kind>torch|stable)(?P<torch>\d[\w.]*)")


class InvalidAbiTag(ValueError):
    """A label that is not a kernelpack ABI tag; the message quotes it."""


@dataclass(frozen=True)
class AbiTag:
    """A parsed ABI label: the CUDA build, the ABI kind and the torch it binds to."""

    cuda: str
    """`cu130` (CUDA 13.0) or `cpu`."""
    kind: str
    """`torch`: imports only under exactly `torch`; `stable`: under any torch >= `torch`."""
    torch: Version

    @classmethod
    def parse(cls, label: str) -> AbiTag:
        """Parse a local version label; `InvalidAbiTag` quoting `label` when it is none of ours."""
        match = _LABEL.fullmatch(label)
        if match is None:
            raise InvalidAbiTag(f"{label!r} is not a kernelpack ABI tag (e.g. cu130torch2.14.1)")
        try:
            torch = Version(match["torch"])
        except InvalidVersion:
            raise InvalidAbiTag(f"{label!r}: {match['torch']!r} is not a torch version") from None
        return cls(cuda=match["cuda"], kind=match["kind"], torch=torch)

    @classmethod
    def of_version(cls, version: Version) -> AbiTag | None:
        """The tag in `version`'s local part, or None when it carries none of ours."""
        if version.local is None:
            return None
        try:
            return cls.parse(version.local)
        except InvalidAbiTag:
            return None

    @property
    def cuda_major(self) -> int | None:
        """13 for `cu130`, 12 for `cu128`; None for `cpu`."""
        return None if self.cuda == "cpu" else int(self.cuda[2:-1])

    @staticmethod
    def cuda_of(torch: Version) -> int | None:
        """The CUDA major of a torch build whose local version names one (`2.11.0+cu130`)."""
        match = re.fullmatch(r"cu(\d+)\d", torch.local or "")
        return int(match[1]) if match else None

    def accepts(self, torch: Version) -> bool:
        """Whether a wheel with this tag imports under `torch` (its public release only)."""
        running = Version(torch.public)
        if self.kind == "stable":
            return running.release[:2] >= self.torch.release[:2]
        return running == self.torch

    def __str__(self) -> str:
        return f"{self.cuda}{self.kind}{self.torch}"
