"""`PackageStatus`: a package's kernels as `kernelpack status` and tools see them.

The same facts as `status()`, plus what the build record says of each kernel (archs, ABI), in
the JSON shape of docs/runtime.md: `{"package", "version", "kernels": {name: {"available",
"reason", "archs", "abi"}}}`. `rows()` is the status table's content, shared by
`kernelpack status` (drawn with rich) and `python -m kernelpack_runtime status` (plain text,
`render_text`), so both show the same table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kernelpack_runtime.reason import Reason
from kernelpack_runtime.record import BuiltKernel
from kernelpack_runtime.registry import Registry

__all__ = ["COLUMNS", "KernelStatus", "PackageStatus", "render_text"]

#: The status table's columns.
COLUMNS = ("kernel", "available", "archs", "abi", "reason")


@dataclass(frozen=True)
class KernelStatus:
    """One kernel: usable here or not (with its reason), and what it was built for."""

    name: str
    reason: Reason | None
    archs: tuple[str, ...]
    abi: str | None
    parts: Mapping[str, tuple[tuple[str, ...], bool | None]] = field(default_factory=dict)
    """The kernels compiled into this library with archs of their own: name -> (archs,
    whether they run on the GPU found; None without one)."""

    @property
    def available(self) -> bool:
        return self.reason is None

    def parts_line(self) -> str | None:
        """Which of the library's kernels run on the GPU found, in words (None: no parts or
        no GPU)."""
        known = {name: runs for name, (_, runs) in self.parts.items() if runs is not None}
        if not known:
            return None
        here = ", ".join(name for name, runs in known.items() if runs) or "none"
        elsewhere = [name for name, runs in known.items() if not runs]
        return f"runs here: {here}" + (
            f"; not on this GPU: {', '.join(elsewhere)}" if elsewhere else ""
        )

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "available": self.available,
            "reason": self.reason.to_json() if self.reason is not None else None,
            "archs": list(self.archs),
            "abi": self.abi,
        }
        if self.parts:
            data["parts"] = {
                name: {"archs": list(archs), "runs_here": runs}
                for name, (archs, runs) in self.parts.items()
            }
        return data


@dataclass(frozen=True)
class PackageStatus:
    """Every kernel of a package, from its registry."""

    package: str
    version: str | None
    kernels: tuple[KernelStatus, ...]

    @classmethod
    def of(cls, registry: Registry) -> PackageStatus:
        """Ask `registry` about every kernel its build record lists."""
        record = registry.record
        if record is None:  # no record, or an invalid one: its names get `record-invalid`
            return cls(
                registry.package,
                None,
                tuple(
                    KernelStatus(name, registry.unavailable_reason(name), (), None)
                    for name in registry.kernels()
                ),
            )
        kernels = []
        for name, entry in record.kernels.items():
            reason = registry.unavailable_reason(name)
            if isinstance(entry, BuiltKernel):
                archs = tuple(str(arch) for arch in entry.archs)
                kernels.append(
                    KernelStatus(name, reason, archs, entry.abi, _parts(registry, entry))
                )
            else:
                kernels.append(KernelStatus(name, reason, (), None))
        return cls(package=registry.package, version=record.version, kernels=tuple(kernels))

    @property
    def title(self) -> str:
        """The table's title: the package and its version."""
        return f"{self.package} {self.version or ''}".strip()

    def rows(self) -> list[tuple[str, str, str, str, str]]:
        """One row per kernel, in `COLUMNS` order."""
        return [
            (
                kernel.name,
                "yes" if kernel.available else "no",
                " ".join(kernel.archs) or "-",
                kernel.abi or "-",
                f"{kernel.reason.code}: {kernel.reason.message}"
                if kernel.reason
                else kernel.parts_line() or "-",
            )
            for kernel in self.kernels
        ]

    def to_json(self) -> dict[str, Any]:
        from kernelpack_runtime.digest import VERIFY_VARIABLE, verification_enabled

        verify = verification_enabled()
        return {
            "package": self.package,
            "version": self.version,
            "kernels": {kernel.name: kernel.to_json() for kernel in self.kernels},
            # load() checks each library against its recorded SHA-256 unless turned off
            "verify_libraries": {
                "enabled": verify,
                "reason": None if verify else f"{VERIFY_VARIABLE}=0",
            },
        }


def _parts(
    registry: Registry, entry: BuiltKernel
) -> dict[str, tuple[tuple[str, ...], bool | None]]:
    if not entry.parts:
        return {}
    capability = registry.capability()
    runs = entry.parts_on(capability) if capability is not None else {}
    return {
        name: (tuple(str(a) for a in archs), runs.get(name)) for name, archs in entry.parts.items()
    }


def render_text(report: PackageStatus, caption: str | None = None) -> str:
    """The status table as plain text: the title, the columns aligned, then `caption`."""
    rows = [COLUMNS, *report.rows()]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS) - 1)]
    lines = [report.title]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    if caption:
        lines.append(caption)
    return "\n".join(lines) + "\n"
