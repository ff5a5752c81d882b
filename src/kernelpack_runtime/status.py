"""`PackageStatus`: a package's kernels as `kernelpack status` and tools see them.

The same facts as `status()`, plus what the build record says of each kernel (archs, ABI), in
the JSON shape of docs/runtime.md: `{"package", "version", "kernels": {name: {"available",
"reason", "archs", "abi"}}}`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernelpack_runtime.reason import Reason
from kernelpack_runtime.record import BuiltKernel
from kernelpack_runtime.registry import Registry

__all__ = ["KernelStatus", "PackageStatus"]


@dataclass(frozen=True)
class KernelStatus:
    """One kernel: usable here or not (with its reason), and what it was built for."""

    name: str
    reason: Reason | None
    archs: tuple[str, ...]
    abi: str | None

    @property
    def available(self) -> bool:
        return self.reason is None

    def to_json(self) -> dict[str, Any]:
        return {
            "available": self.available,
            "reason": self.reason.to_json() if self.reason is not None else None,
            "archs": list(self.archs),
            "abi": self.abi,
        }


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
                kernels.append(KernelStatus(name, reason, entry.archs, entry.abi))
            else:
                kernels.append(KernelStatus(name, reason, (), None))
        return cls(package=registry.package, version=record.version, kernels=tuple(kernels))

    def to_json(self) -> dict[str, Any]:
        return {
            "package": self.package,
            "version": self.version,
            "kernels": {kernel.name: kernel.to_json() for kernel in self.kernels},
        }
