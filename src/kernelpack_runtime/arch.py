"""`Arch`: a CUDA GPU architecture as written in `kernels.toml` ("8.0", "9.0a", "10.0f").

A plain arch ("8.0") is SASS that also runs on later minors of the same major; "a"
(arch-specific, e.g. sm_90a) runs only on exactly that compute capability; "f" (family)
runs on the same major with an equal or later minor.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

__all__ = ["KNOWN_ARCHS", "Arch", "InvalidArch"]

_ARCH_RE = re.compile(r"^(\d{1,2})\.(\d)([af]?)$")
# nvcc spellings people paste into manifests: "sm_90a", "sm90", "compute_100f", "90".
_NVCC_NAME_RE = re.compile(r"^(?:sm|compute)?_?(\d{1,2})(\d)([af]?)$")

# The compute capabilities NVIDIA has shipped. Used only to reject typos such as "9.5" in
# `kernelpack check`, which needs no compiler; whether *this* nvcc can build an arch is asked
# of nvcc itself by the toolchain.
_CAPABILITIES = (
    (5, 0), (5, 2), (5, 3), (6, 0), (6, 1), (6, 2), (7, 0), (7, 2), (7, 5),
    (8, 0), (8, 6), (8, 7), (8, 8), (8, 9), (9, 0),
    (10, 0), (10, 1), (10, 3), (11, 0), (12, 0), (12, 1),
)  # fmt: skip
_SUFFIXED_FROM = (9, 0)  # "a" exists from sm_90a on
_FAMILY_FROM = (10, 0)  # "f" exists from sm_100f on


class InvalidArch(ValueError):
    """A text that is not a CUDA arch `Arch.parse` knows; the message quotes it."""


@dataclass(frozen=True, order=True)
class Arch:
    """One GPU architecture target."""

    major: int
    minor: int
    suffix: str = ""

    @classmethod
    def parse(cls, text: str) -> Arch:
        """Parse "9.0a"; raise `InvalidArch` naming the bad input and the known archs."""
        match = _ARCH_RE.match(text.strip()) if isinstance(text, str) else None
        if match is None:
            raise InvalidArch(_not_an_arch(text) + _nvcc_name_hint(text))
        arch = cls(int(match.group(1)), int(match.group(2)), match.group(3))
        if arch not in _all_known():
            raise InvalidArch(_not_an_arch(text))
        return arch

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}{self.suffix}"

    @property
    def capability(self) -> tuple[int, int]:
        return (self.major, self.minor)

    @property
    def sm(self) -> str:
        """The SASS target name, e.g. `sm_90a`."""
        return f"sm_{self.major}{self.minor}{self.suffix}"

    @property
    def compute(self) -> str:
        """The virtual (PTX) target name, e.g. `compute_90a`."""
        return f"compute_{self.major}{self.minor}{self.suffix}"

    def gencode(self) -> str:
        """nvcc flag embedding SASS for exactly this arch."""
        return f"-gencode=arch={self.compute},code={self.sm}"

    def ptx_gencode(self) -> str:
        """nvcc flag embedding this arch's PTX (JIT-compiled by the driver on newer GPUs)."""
        return f"-gencode=arch={self.compute},code={self.compute}"

    def runs_on(self, capability: tuple[int, int], *, ptx: bool = False) -> bool:
        """Whether code built for this arch runs on a device of `capability`.

        With `ptx`, the embedded PTX also counts: plain PTX JIT-compiles on any later device.
        """
        if self.suffix == "a":
            return capability == self.capability
        if self.suffix == "f" or not ptx:
            return capability[0] == self.major and capability[1] >= self.minor
        return capability >= self.capability


@functools.cache
def _all_known() -> frozenset[Arch]:
    archs: set[Arch] = set()
    for major, minor in _CAPABILITIES:
        archs.add(Arch(major, minor))
        if (major, minor) >= _SUFFIXED_FROM:
            archs.add(Arch(major, minor, "a"))
        if (major, minor) >= _FAMILY_FROM:
            archs.add(Arch(major, minor, "f"))
    return frozenset(archs)


def __getattr__(name: str) -> object:
    # `KNOWN_ARCHS` (every arch `Arch.parse` accepts) is made on first use: importing the
    # runtime on a machine that never parses an arch does not build it.
    if name == "KNOWN_ARCHS":
        return _all_known()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    #: Every arch string `Arch.parse` accepts.
    KNOWN_ARCHS: frozenset[Arch]


def _not_an_arch(text: object) -> str:
    shown = f'"{text}"' if isinstance(text, str) else repr(text)
    return f"{shown} is not a CUDA arch (known: {_known_range()})"


def _nvcc_name_hint(text: object) -> str:
    """`; write "9.0a"` when `text` is an nvcc name ("sm_90a") of a known arch."""
    match = _NVCC_NAME_RE.match(text.strip().lower()) if isinstance(text, str) else None
    if match is None:
        return ""
    arch = Arch(int(match.group(1)), int(match.group(2)), match.group(3))
    return f'; write "{arch}"' if arch in _all_known() else ""


def _known_range() -> str:
    ordered = sorted(_all_known())
    return f"{ordered[0]} … {ordered[-1]}"
