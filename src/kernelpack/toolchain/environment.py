"""The field's build-time variables: `MAX_JOBS`, `TORCH_CUDA_ARCH_LIST`, `KERNELPACK_ARCH`.

- `MAX_JOBS=N` caps the parallel jobs (as torch's BuildExtension reads it).
- `TORCH_CUDA_ARCH_LIST="8.0;9.0a"` (torch's spellings: `;` or spaces between entries,
  `+PTX` suffixes, `a`/`f` suffixes) names the GPUs to build for. Each kernel keeps the archs
  of its manifest whose code runs on one of them (`Arch.runs_on`): `9.0a` stays under
  `9.0`, `8.0` stays under `8.6`. The list never adds an arch (nor PTX) the manifest lacks.
- `KERNELPACK_ARCH=native` names the GPUs this machine sees (NVML, no CUDA initialisation),
  and narrows the same way; without a visible GPU it is an error.

Both narrowings apply when both are set. A kernel left with no arch is skipped as
`not-selected`, its reason naming the variable.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from kernelpack.errors import UsageError
from kernelpack_runtime.arch import Arch
from kernelpack_runtime.device import DeviceFacts, default_probe

__all__ = ["ArchFilter", "arch_filter", "max_jobs", "parse_arch_list"]

_ENTRY_RE = re.compile(r"^(\d{1,2}\.\d[af]?)(\+PTX)?$", re.IGNORECASE)


@dataclass(frozen=True)
class ArchFilter:
    """GPUs to build for: a kernel keeps the archs whose code runs on one of them."""

    capabilities: frozenset[tuple[int, int]]
    origin: str
    """What asked for it, for messages: `TORCH_CUDA_ARCH_LIST=9.0` or
    `KERNELPACK_ARCH=native (NVIDIA H200, sm_90)`."""
    native: bool = False
    """The GPUs are this machine's (`KERNELPACK_ARCH=native`)."""
    narrower: ArchFilter | None = None
    """A second filter applied after this one (both variables set)."""

    def narrow(self, archs: Sequence[Arch]) -> tuple[Arch, ...]:
        """The archs of `archs` whose code runs on one of the GPUs (of every filter)."""
        kept = tuple(a for a in archs if any(a.runs_on(c) for c in self.capabilities))
        return self.narrower.narrow(kept) if self.narrower is not None else kept

    def describe(self) -> str:
        """`TORCH_CUDA_ARCH_LIST=9.0` (and the second filter's origin, joined by " and ")."""
        if self.narrower is None:
            return self.origin
        return f"{self.origin} and {self.narrower.describe()}"


def parse_arch_list(value: str, name: str = "TORCH_CUDA_ARCH_LIST") -> frozenset[tuple[int, int]]:
    """The compute capabilities of a `TORCH_CUDA_ARCH_LIST` value ("9.0a;10.0", "8.0 9.0+PTX").

    An entry that is not an arch is a `UsageError` quoting it.
    """
    capabilities: set[tuple[int, int]] = set()
    for entry in value.replace(",", ";").replace(" ", ";").split(";"):
        entry = entry.strip()
        if not entry:
            continue
        match = _ENTRY_RE.match(entry)
        try:
            if match is None:
                raise ValueError(f'"{entry}" is not a CUDA arch such as 9.0, 9.0a or 9.0+PTX')
            arch = Arch.parse(match.group(1).lower())
        except ValueError as exc:
            raise UsageError(f"{name}={value}: {exc}") from None
        capabilities.add(arch.capability)
    if not capabilities:
        raise UsageError(f"{name}={value!r} names no arch; expected e.g. 9.0 or 9.0a;10.0")
    return frozenset(capabilities)


def _native(probe: Callable[[], DeviceFacts]) -> ArchFilter:
    facts = probe()
    if not facts.devices:
        raise UsageError(
            "KERNELPACK_ARCH=native needs a visible GPU, but there is "
            f"{facts.describe()}; unset it or name the archs in TORCH_CUDA_ARCH_LIST"
        )
    shown = ", ".join(f"{d.name}, {d.sm}" for d in facts.devices)
    return ArchFilter(
        capabilities=frozenset(d.capability for d in facts.devices),
        origin=f"KERNELPACK_ARCH=native ({shown})",
        native=True,
    )


def arch_filter(
    environ: Mapping[str, str], probe: Callable[[], DeviceFacts] | None = None
) -> ArchFilter | None:
    """The filter `TORCH_CUDA_ARCH_LIST` and `KERNELPACK_ARCH` ask for; None when neither
    is set. `probe` (default: NVML) is asked only for `KERNELPACK_ARCH=native`."""
    found: list[ArchFilter] = []
    listed = environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    if listed:
        found.append(ArchFilter(parse_arch_list(listed), f"TORCH_CUDA_ARCH_LIST={listed}"))
    wanted = environ.get("KERNELPACK_ARCH", "").strip()
    if wanted:
        if wanted.lower() != "native":
            raise UsageError(f"KERNELPACK_ARCH={wanted}: expected native (or leave it unset)")
        found.append(_native(probe or default_probe))
    if not found:
        return None
    if len(found) == 1:
        return found[0]
    first, second = found
    return ArchFilter(first.capabilities, first.origin, native=first.native, narrower=second)


def max_jobs(environ: Mapping[str, str]) -> int | None:
    """`MAX_JOBS` as a positive integer, None when unset; anything else is a `UsageError`."""
    value = environ.get("MAX_JOBS", "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise UsageError(f"MAX_JOBS={value} is not a positive integer")
    return int(value)
