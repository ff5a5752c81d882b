"""`kernels.toml`: the one manifest of a kernel package, parsed into frozen, typed values.

`load()` reads one file (and the project's `pyproject.toml` `[tool.kernelpack]` table, see
`kernelpack.settings`) and either returns a `Manifest` or raises `ManifestError` with a
one-line message naming the file, the kernel and the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from packaging.version import Version

from kernelpack.arch import Arch

__all__ = ["ALL_PLATFORMS", "Abi", "KernelSpec", "Manifest", "load"]

Abi = Literal["torch", "stable"]

#: Platform names (`platform.machine()`) a manifest may name.
ALL_PLATFORMS = ("x86_64", "aarch64")

#: Key of `KernelSpec.arch` used when `arch` is a plain list or string (every platform).
ANY_PLATFORM = "*"

_STABLE_TARGET_DEFAULT = Version("2.10")


@dataclass(frozen=True)
class KernelSpec:
    """One `[<name>]` table of `kernels.toml`, with paths resolved against its folder."""

    name: str
    folder: Path
    """Absolute path of the kernel folder, `<package_dir>/<name>`."""
    ops: str
    """torch.ops namespace; default `<package>_<name>`."""
    sources: tuple[Path, ...]
    """Absolute, globs expanded, sorted, de-duplicated. Empty when `missing_sources` is set."""
    arch: Mapping[str, tuple[Arch, ...]]
    """Platform (`x86_64`, `aarch64`) or `ANY_PLATFORM` -> archs. Use `archs_for()`."""
    abi: Abi = "torch"
    description: str = ""
    include_dirs: tuple[Path, ...] = ()
    cxx_std: int | None = None
    """None: the default for the abi and torch (17 stable, 20 for torch >= 2.14 classic)."""
    stable_target: Version = _STABLE_TARGET_DEFAULT
    ptx: bool = False
    min_cuda: Version | None = None
    platforms: tuple[str, ...] | None = None
    """None: every platform."""
    depends: tuple[str, ...] = ()
    nvcc_flags: tuple[str, ...] = ()
    cxx_flags: tuple[str, ...] = ()
    defines: Mapping[str, str] = field(default_factory=dict)
    libraries: tuple[str, ...] = ()
    missing_sources: str | None = None
    """Set (to a one-line message) only when loaded with `allow_missing_sources=True` and a
    source is absent, e.g. an uninitialised git submodule; the plan skips `sources-missing`."""

    def archs_for(self, machine: str) -> tuple[Arch, ...] | None:
        """The archs to build on `machine`, or None when the arch table omits it."""
        if ANY_PLATFORM in self.arch:
            return self.arch[ANY_PLATFORM]
        return self.arch.get(machine)


@dataclass(frozen=True)
class Manifest:
    """A parsed `kernels.toml`."""

    path: Path
    """Absolute path of `kernels.toml`."""
    package: str
    """Import name of the kernel package (the folder holding `kernels.toml`)."""
    package_dir: Path
    kernels: tuple[KernelSpec, ...]

    def kernel(self, name: str) -> KernelSpec:
        for spec in self.kernels:
            if spec.name == name:
                return spec
        raise KeyError(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(spec.name for spec in self.kernels)


def load(path: Path, *, allow_missing_sources: bool = False) -> Manifest:
    """Parse `path` (a `kernels.toml`); raise `ManifestError` on any problem."""
    raise NotImplementedError
