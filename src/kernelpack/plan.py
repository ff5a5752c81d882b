"""The build plan: for each kernel, build (with exact flags) or skip (with a `Reason`).

Pure: `plan()` takes a `Manifest`, a `Toolchain` and a `Selection` and does no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kernelpack.arch import Arch
from kernelpack.manifest import KernelSpec, Manifest
from kernelpack.reason import Reason
from kernelpack.toolchain import Toolchain

__all__ = ["BuildPlan", "KernelPlan", "Selection", "plan"]


@dataclass(frozen=True)
class Selection:
    """Which kernels to build and whether a skip is an error.

    From the environment: `<PREFIX>_KERNELS=a,b` / `KERNELPACK_KERNELS`, and
    `<PREFIX>_KERNELS_REQUIRE=1` / `KERNELPACK_REQUIRE=1`; CLI flags override.
    """

    kernels: frozenset[str] | None = None
    """None: every kernel."""
    require: bool = False

    @classmethod
    def from_env(cls, prefix: str, environ: Mapping[str, str]) -> Selection:
        raise NotImplementedError


@dataclass(frozen=True)
class KernelPlan:
    """The decision for one kernel."""

    spec: KernelSpec
    skip: Reason | None
    """None: build it."""
    archs: tuple[Arch, ...] = ()
    gencode_flags: tuple[str, ...] = ()
    """`-gencode=…` for every arch (SASS), plus the PTX of the highest arch when `ptx`."""
    cxx_std: int = 17

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def build(self) -> bool:
        return self.skip is None


@dataclass(frozen=True)
class BuildPlan:
    """Every kernel's decision, plus what the version tag needs."""

    manifest: Manifest
    toolchain: Toolchain
    kernels: tuple[KernelPlan, ...]

    @property
    def to_build(self) -> tuple[KernelPlan, ...]:
        return tuple(k for k in self.kernels if k.build)

    @property
    def skipped(self) -> tuple[KernelPlan, ...]:
        return tuple(k for k in self.kernels if not k.build)

    def version_tag(self) -> str:
        """DESIGN's local version: `cu130torch2.14.1`, or `cu130stable2.10` when all stable."""
        raise NotImplementedError


def plan(manifest: Manifest, toolchain: Toolchain, selection: Selection | None = None) -> BuildPlan:
    """Decide every kernel; raise `PlanError` when `selection.require` and any kernel skips,
    or when a kernel's settings cannot work with this toolchain (e.g. C++17 with torch 2.14's
    classic ATen headers)."""
    raise NotImplementedError
