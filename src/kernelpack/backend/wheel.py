"""Wheels: the package's Python files, each kernel's `_C`, the build record and the metadata.

The version is the project's plus the plan's ABI tag (`0.3.0+cu130torch2.14.1`), identical
in the file name and in METADATA. The tag fits the ABI and the libraries
(`kernelpack.backend.tags`): `cp311-cp311-manylinux_2_28_x86_64` when any kernel uses the
classic ABI, `cp310-abi3-manylinux_2_28_x86_64` when all are stable (the abi3 floor is the
project's `requires-python` minimum). Sources (`csrc/`, `.cu`, headers) never ship (a
`build.toml` project ships the files of its `pyext` extensions, as kernel-builder does), nor does
anything outside the package folder (`kernelpack.backend._tree`) except the license files,
which go to `.dist-info/licenses/` (PEP 639). `wheel.wheelfile.WheelFile` writes the RECORD
(with `SOURCE_DATE_EPOCH` as every member's time, when set).

Each write stages in its own `.<wheel>.<random>.partial/` folder next to the wheel, holding
a lock while it writes, then renames the wheel into place: concurrent builds of one tree do
not share a folder, and a staging folder whose writer died (SIGKILL) is removed by the next
wheel written there.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TextIO

from packaging.tags import Tag
from packaging.utils import canonicalize_name
from packaging.version import Version
from wheel.wheelfile import WheelFile

from kernelpack import __version__
from kernelpack.backend._tree import tree_files
from kernelpack.backend.metadata import (
    CoreMetadata,
    core_metadata,
    entry_points_text,
    requirements,
)
from kernelpack.backend.sdist import source_date_epoch
from kernelpack.backend.tags import platform_tag, provisional_platform, wheel_tag
from kernelpack.builder.outputs import BuildResult
from kernelpack.errors import BuildError
from kernelpack.plan import BuildPlan
from kernelpack.project import buildtoml
from kernelpack.project.filekinds import BUILD_OUTPUT_SUFFIXES, CACHE_DIRS, NATIVE_DIRS, is_native
from kernelpack.project.locate import Project
from kernelpack.syntax import pth
from kernelpack_runtime.record import FILENAME as RECORD_FILENAME
from kernelpack_runtime.record import BuiltKernel

__all__ = [
    "PURE_TAG",
    "dist_info_name",
    "package_files",
    "remove_stale_staging",
    "wheel_metadata",
    "wheel_name",
    "write_dist_info",
    "write_wheel",
]

# Build outputs live in <project root>/build, outside the package: a subpackage (or kernel)
# named `build` is Python code and ships. The kernels' libraries are added from the build.
_SKIP_DIRS = NATIVE_DIRS | CACHE_DIRS
_STAGING_SUFFIX = ".partial"
_LOCK = "lock"
# A staging folder younger than this without its lock file may be a writer that has just
# created it: left alone.
_STAGING_GRACE_S = 60.0


def _dist(project: Project) -> str:
    return canonicalize_name(project.dist_name).replace("-", "_")


def dist_info_name(project: Project, version: str) -> str:
    """`kpdemo-0.3.0+cu130stable2.10.dist-info`."""
    return f"{_dist(project)}-{Version(version)}.dist-info"


def wheel_name(project: Project, version: str, tag: Tag) -> str:
    """`kpdemo-0.3.0+cu130stable2.10-cp310-abi3-manylinux_2_28_x86_64.whl`."""
    return f"{_dist(project)}-{Version(version)}-{tag}.whl"


def wheel_metadata(project: Project, plan: BuildPlan) -> CoreMetadata:
    """The METADATA of a wheel of `project` built by `plan`: `[project]` with the plan's
    version, plus the run-time requirements of its ABI tag
    (`kernelpack.backend.metadata.requirements`)."""
    return core_metadata(project, plan.version, requirements(project, plan.abi_tag))


#: The tag of a wheel holding no compiled library, as `wheel`'s bdist_wheel writes for a
#: pure-Python project: any Python 3, any platform (pip installs it everywhere).
PURE_TAG = Tag("py3", "none", "any")


def _wheel_text(tag: Tag) -> str:
    purelib = "true" if tag == PURE_TAG else "false"
    return (
        "Wheel-Version: 1.0\n"
        f"Generator: kernelpack {__version__}\n"
        f"Root-Is-Purelib: {purelib}\n"
        f"Tag: {tag}\n"
    )


def _dist_info_files(metadata: CoreMetadata, tag: Tag) -> Iterator[tuple[str, bytes | Path]]:
    """(name inside `.dist-info/`, text or file) of every metadata file but RECORD."""
    yield "METADATA", metadata.text().encode("utf-8")
    yield "WHEEL", _wheel_text(tag).encode("utf-8")
    entry_points = entry_points_text(metadata)
    if entry_points:
        yield "entry_points.txt", entry_points.encode("utf-8")
    for file, relative in metadata.license_files:
        yield f"licenses/{relative}", file


def write_dist_info(project: Project, plan: BuildPlan, directory: Path, tag: Tag) -> str:
    """Write `<dist>.dist-info/` (METADATA, WHEEL, entry points, licenses) of a wheel built
    by `plan` under `directory`."""
    metadata = wheel_metadata(project, plan)
    name = dist_info_name(project, plan.version)
    folder = directory / name
    for relative, content in _dist_info_files(metadata, tag):
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copyfile(content, path)
        else:
            path.write_bytes(content)
    return name


def package_files(project: Project, *, every_file: bool = False) -> Iterator[tuple[Path, str]]:
    """(file, archive name) for the package's Python surface: no sources, no libraries,
    no build record (the wheel gets the freshly built ones), no temporary files. A symlink
    leading out of the package is a `UsageError`.

    A `build.toml` project ships what kernel-builder ships: the files of its `pyext`
    extensions (`py` and `pyi` always, then the listed data files: `json`, `hpp`, …), native
    ones included when listed. With `every_file`, every file but build outputs: what
    kernel-builder copies into a `[torch-noarch]` project's Hub variant.
    """
    package_dir = project.package_dir
    suffixes: frozenset[str] | None = None
    if project.manifest_path.name == buildtoml.BUILD_TOML and not every_file:
        suffixes = frozenset(f".{ext}" for ext in buildtoml.read(project.manifest_path).pyext)

    def skip_dir(rel: Path) -> bool:
        return rel.name in _SKIP_DIRS

    def skip_file(rel: Path) -> bool:
        if rel.suffix in BUILD_OUTPUT_SUFFIXES or rel.as_posix() == RECORD_FILENAME:
            return True
        if every_file:
            return False
        return rel.suffix not in suffixes if suffixes is not None else is_native(rel)

    for file, rel in tree_files(package_dir, skip_dir=skip_dir, skip_file=skip_file):
        yield file, f"{project.package}/{rel.as_posix()}"


def remove_stale_staging(wheel_dir: Path) -> list[Path]:
    """Remove the `.<wheel>.<random>.partial/` folders in `wheel_dir` whose writer is gone
    (its lock is free); return them."""
    removed: list[Path] = []
    try:
        candidates = [
            p
            for p in wheel_dir.iterdir()
            if p.name.startswith(".") and p.name.endswith(_STAGING_SUFFIX) and p.is_dir()
        ]
    except FileNotFoundError:
        return removed
    for folder in candidates:
        lock = folder / _LOCK
        try:
            fd = os.open(lock, os.O_RDWR)
        except FileNotFoundError:
            try:
                young = time.time() - folder.stat().st_mtime < _STAGING_GRACE_S
            except FileNotFoundError:
                continue
            if young:
                continue
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # a live writer
        finally:
            os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _write_members(tmp: Path, members: list[tuple[str, bytes | Path]]) -> None:
    with WheelFile(tmp, "w") as whl:
        for arcname, content in members:
            if isinstance(content, Path):
                whl.write(str(content), arcname)
            else:
                whl.writestr(arcname, content)


def write_wheel(
    project: Project,
    result: BuildResult,
    wheel_dir: Path,
    *,
    editable_path: Path | None = None,
    stream: TextIO | None = None,
    editable_files: Mapping[str, str] | None = None,
) -> Path:
    """Write the wheel of a finished build into `wheel_dir` and return its path.

    With `editable_path` (PEP 660), the wheel holds only the metadata, a `.pth` naming
    that folder (the libraries were installed in place) and `editable_files` (archive name
    -> text: the rebuild-on-import hook, see `kernelpack.backend.editable`). A warning about
    the platform tag goes to `stream` (default stderr). Everything that can be wrong with the
    project (`[project]`, a symlink out of the package) is raised before anything is written.
    """
    version = result.record.version
    source_date_epoch()  # a bad value is one line here, not a traceback from the zip writer
    metadata = wheel_metadata(project, result.plan)
    package = project.package
    members: list[tuple[str, bytes | Path]] = []
    if editable_path is not None:
        line = pth.path_line(str(editable_path.absolute()), what="the project's folder")
        members.append((f"_{_dist(project)}_editable.pth", pth.text([line]).encode()))
        members += [(name, text.encode()) for name, text in (editable_files or {}).items()]
        platform_name = provisional_platform()
    else:
        generated = {f"{package}/{rel}": staged for rel, staged in result.generated.items()}
        members += [
            (arcname, file)
            for file, arcname in package_files(project)
            if arcname not in generated  # a copy left by an in-place build
        ]
        members += list(generated.items())
        for kernel, staged in result.libraries.items():
            entry = result.record.kernels[kernel]
            library = entry.library if isinstance(entry, BuiltKernel) else f"{kernel}/{staged.name}"
            members.append((f"{package}/{library}", staged))
        members.append((f"{package}/{RECORD_FILENAME}", result.record.dumps().encode("utf-8")))
        found = platform_tag(list(result.libraries.values()))
        if found.warning:
            print(found.warning, file=stream or sys.stderr)
        platform_name = found.name
    tag = wheel_tag(result.plan, platform_name)
    if editable_path is None and not result.libraries:
        tag = PURE_TAG  # no compiled code: not tied to a Python, an ABI or a glibc
    info = dist_info_name(project, version)
    members += [(f"{info}/{name}", content) for name, content in _dist_info_files(metadata, tag)]

    wheel_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(wheel_dir)
    path = wheel_dir / wheel_name(project, version, tag)
    # WheelFile needs a valid wheel name: write it in a hidden folder of this write's own,
    # locked while it is written, then rename.
    staging = Path(tempfile.mkdtemp(prefix=f".{path.stem}.", suffix=_STAGING_SUFFIX, dir=wheel_dir))
    try:
        fd = os.open(staging / _LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            tmp = staging / path.name
            try:
                _write_members(tmp, members)
                os.replace(tmp, path)
            except OSError as exc:  # a full disk (ENOSPC), a file size limit (EFBIG)...
                raise BuildError(
                    f"{path}: cannot write the wheel: {exc.strerror or exc}; nothing was written"
                ) from None
        finally:
            os.close(fd)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return path
