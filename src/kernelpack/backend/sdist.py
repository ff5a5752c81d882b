"""Source distributions: the project's files (kernel sources included) and PKG-INFO.

The sdist carries the project's own version (no ABI tag: nothing is compiled yet) and
declares `Requires-Dist` dynamic (PEP 643): the wheel built from it adds kernelpack-runtime
and the torch its kernels are compiled against. Build outputs, VCS folders, caches and
temporary files stay out; license files are project files and go in. Symlinks are stored as
the files they name (only inside the project: see `kernelpack.backend._tree`), so the
archive holds no link at all.

Reproducible: members sorted, owner root, modes 0644/0755, and with `SOURCE_DATE_EPOCH`
every member's time (and the gzip header's) is that time, so two builds of one tree are
byte-identical.
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import Version

from kernelpack.backend._tree import tree_files
from kernelpack.backend.metadata import core_metadata
from kernelpack.project.filekinds import BUILD_OUTPUT_DIRS, BUILD_OUTPUT_SUFFIXES, CACHE_DIRS
from kernelpack.project.locate import Project
from kernelpack.toolchain import environment
from kernelpack_runtime._files import atomic_path
from kernelpack_runtime.record import FILENAME as RECORD_FILENAME

__all__ = ["sdist_files", "sdist_name", "source_date_epoch", "write_sdist"]


def sdist_name(project: Project) -> str:
    """`kpdemo-0.3.0` (the archive is `<name>.tar.gz`, its top folder `<name>/`)."""
    dist = canonicalize_name(project.dist_name).replace("-", "_")
    return f"{dist}-{Version(project.version)}"


def _skip_dir(rel: Path) -> bool:
    # Build outputs only at the project root; deeper down such a folder is the project's.
    if len(rel.parts) == 1 and rel.name in BUILD_OUTPUT_DIRS:
        return True
    return rel.name in CACHE_DIRS or rel.name.endswith(".egg-info")


def _skip_file(rel: Path) -> bool:
    return rel.suffix in BUILD_OUTPUT_SUFFIXES or rel.name == RECORD_FILENAME


def sdist_files(project: Project) -> Iterator[tuple[Path, str]]:
    """(file to read, path relative to the project root) of every file the sdist holds."""
    for file, rel in tree_files(project.root, skip_dir=_skip_dir, skip_file=_skip_file):
        yield file, rel.as_posix()


def source_date_epoch() -> int | None:
    """`SOURCE_DATE_EPOCH` of this process as an integer; None when unset; `UsageError`
    when not a number (`kernelpack.toolchain.environment.source_date_epoch`)."""
    return environment.source_date_epoch(os.environ)


def write_sdist(project: Project, sdist_dir: Path) -> Path:
    """Write `<name>.tar.gz` into `sdist_dir` (atomically) and return its path."""
    name = sdist_name(project)
    epoch = source_date_epoch()
    metadata = core_metadata(project, dynamic=["Requires-Dist"])
    pkg_info = metadata.text().encode("utf-8")
    files = list(sdist_files(project))  # raises before anything is written
    path = sdist_dir / f"{name}.tar.gz"
    with (
        atomic_path(path) as tmp,
        open(tmp, "wb") as raw,
        gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=epoch or 0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for file, rel in files:
            info = _member(tar.gettarinfo(str(file), arcname=f"{name}/{rel}"), epoch)
            with open(file, "rb") as fh:
                tar.addfile(info, fh)
        info = tarfile.TarInfo(f"{name}/PKG-INFO")
        info.size = len(pkg_info)
        info.mode = 0o644
        info.mtime = epoch if epoch is not None else 0
        tar.addfile(info, io.BytesIO(pkg_info))
    return path


def _member(info: tarfile.TarInfo, epoch: int | None) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = 0o755 if info.mode & 0o111 else 0o644
    info.mtime = epoch if epoch is not None else int(info.mtime)
    return info
