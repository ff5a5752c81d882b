"""What a build produced: the staged libraries, their names in the package, and the record.

`BuildResult` is what `compile_plan` hands over (to the in-place install, the wheel writer and
the CLI's summary); `build_record` maps a plan onto the build record `<pkg>/_kernelpack.json`
(`kernelpack_runtime.record`), the contract between the build and the run time.
"""

from __future__ import annotations

import hashlib
import os
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kernelpack.builder.ninja import Step
from kernelpack.plan import BuildPlan, KernelPlan
from kernelpack.project.filekinds import is_header
from kernelpack.toolchain.launcher.cache import CacheStats
from kernelpack_runtime.record import (
    BuildRecord,
    BuiltKernel,
    KernelRecord,
    SkippedKernel,
    ToolchainRecord,
)

if TYPE_CHECKING:
    from kernelpack.project.manifest import KernelSpec

__all__ = ["BuildResult", "build_record", "library_name", "library_path", "sources_sha256"]


@dataclass(frozen=True)
class BuildResult:
    """A finished build: the record and the staged library of each built kernel."""

    plan: BuildPlan
    record: BuildRecord
    libraries: dict[str, Path]
    """Kernel name -> staged library (absolute path in the build folder)."""
    steps: tuple[Step, ...]
    """Graph steps this run executed (empty for a no-op build), with their times."""
    seconds: float
    build_dir: Path | None = None
    """The build folder (absolute) that holds the staged libraries."""
    cache: CacheStats | None = None
    """What the compiler cache did in this build (None: no launcher, or nothing compiled)."""
    generated: dict[str, Path] = field(default_factory=dict)
    """Generated package file (path relative to the package, e.g. `_ops.py`) -> staged copy."""

    @property
    def compiled(self) -> tuple[Step, ...]:
        """Compile steps only (no links)."""
        return tuple(s for s in self.steps if s.tool != "link")


def library_name(kernel: KernelPlan) -> str:
    """`_C.abi3.so` for a stable kernel, `_C<EXT_SUFFIX>` (e.g. `.cpython-311-…so`) else
    (`_C` is the kernel's module name: another for a `build.toml` project's library)."""
    if kernel.spec.abi == "stable":
        return f"{kernel.spec.module}.abi3.so"
    return kernel.spec.module + str(sysconfig.get_config_var("EXT_SUFFIX"))


def library_path(kernel: KernelPlan, package_dir: Path) -> str:
    """Where the library goes, relative to the package: `rmsnorm/_C.abi3.so` (the kernel's
    folder), or `_relu_1a2b3c4.abi3.so` for a kernel whose folder is the package itself."""
    folder = Path(os.path.relpath(kernel.spec.folder, package_dir))
    return (folder / library_name(kernel)).as_posix()


def sources_sha256(spec: KernelSpec, package_dir: Path) -> str:
    """SHA-256 over the kernel's sources and the headers in its folder and include dirs.

    Each file contributes its path relative to the package (`../../csrc/x.cu` for a source
    outside it, as in a `build.toml` project) and its bytes, so the digest is the same in
    every clone. Recorded per built kernel; `kernelpack status` compares it with the
    sources of an in-place build to say when they changed since.
    """
    files = set(spec.sources)
    for folder in (spec.folder, *spec.include_dirs):
        if folder.is_dir():
            files.update(p for p in folder.rglob("*") if is_header(p) and p.is_file())
    digest = hashlib.sha256()
    for path in sorted(files):
        name = Path(os.path.relpath(path, package_dir)).as_posix()
        digest.update(name.encode() + b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def build_record(plan: BuildPlan, *, env_prefix: str, cache: CacheStats | None) -> BuildRecord:
    """The record of building `plan`: each kernel built or skipped (with why), the
    toolchain, the selection variables, and what the compiler cache did."""
    package_dir = plan.manifest.package_dir
    return BuildRecord(
        package=plan.manifest.package,
        version=plan.version,
        toolchain=_toolchain_record(plan),
        kernels={k.name: _kernel_record(k, package_dir) for k in plan.kernels},
        selection=plan.environment.recorded(native=_native(plan)),
        env_prefix=env_prefix,
        cache=None if cache is None else cache.record(),
    )


def _kernel_record(kernel: KernelPlan, package_dir: Path) -> KernelRecord:
    spec = kernel.spec
    if kernel.skip is not None:
        return SkippedKernel(reason=kernel.skip, namespace=spec.ops)
    stable = spec.abi == "stable"
    return BuiltKernel(
        abi="stable" if stable else "torch",
        stable_target=(
            f"{spec.stable_target.major}.{spec.stable_target.minor}" if stable else None
        ),
        archs=tuple(str(a) for a in kernel.archs),
        ptx=spec.ptx,
        library=library_path(kernel, package_dir),
        sources_sha256=sources_sha256(spec, package_dir),
        namespace=spec.ops,
    )


def _toolchain_record(plan: BuildPlan) -> ToolchainRecord:
    tc = plan.toolchain
    return ToolchainRecord(
        nvcc=str(tc.nvcc_version) if tc.nvcc_version else None,
        cuda=str(tc.cuda) if tc.cuda else None,
        torch=str(tc.torch_version) if tc.torch_version else None,
        torch_cuda=str(tc.torch_cuda) if tc.torch_cuda else None,
        cxx11_abi=tc.cxx11_abi,
        python=tc.python,
        machine=tc.machine,
    )


def _native(plan: BuildPlan) -> tuple[str, ...]:
    """The compute capabilities `KERNELPACK_ARCH=native` found ("9.0"), if it was set."""
    native: tuple[str, ...] = ()
    archs = plan.archs
    while archs is not None:
        if archs.native:
            native = tuple(f"{major}.{minor}" for major, minor in sorted(archs.capabilities))
        archs = archs.narrower
    return native
