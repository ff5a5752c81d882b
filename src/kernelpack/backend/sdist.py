"""Source distributions: the project's files (kernel sources included) and PKG-INFO.

The sdist carries the project's own version (no ABI tag: nothing is compiled yet); build
outputs, VCS folders and caches stay out.
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

from kernelpack.backend.wheel import metadata_text
from kernelpack.filekinds import BUILD_OUTPUT_DIRS, BUILD_OUTPUT_SUFFIXES, CACHE_DIRS
from kernelpack.project import Project
from kernelpack_runtime._files import atomic_path
from kernelpack_runtime.record import FILENAME as RECORD_FILENAME

__all__ = ["sdist_files", "sdist_name", "write_sdist"]


def sdist_name(project: Project) -> str:
    """`kpdemo-0.3.0` (the archive is `<name>.tar.gz`, its top folder `<name>/`)."""
    dist = canonicalize_name(project.dist_name).replace("-", "_")
    return f"{dist}-{Version(project.version)}"


def sdist_files(project: Project) -> Iterator[Path]:
    """Every file of the project that belongs in the sdist, sorted."""
    root = project.root
    for folder, dirs, files in os.walk(root):
        # Build outputs only at the project root; deeper down such a folder is the project's.
        skip = CACHE_DIRS | BUILD_OUTPUT_DIRS if Path(folder) == root else CACHE_DIRS
        dirs[:] = sorted(d for d in dirs if d not in skip and not d.endswith(".egg-info"))
        for name in sorted(files):
            path = Path(folder) / name
            if path.suffix in BUILD_OUTPUT_SUFFIXES or name == RECORD_FILENAME:
                continue
            yield path


def write_sdist(project: Project, sdist_dir: Path) -> Path:
    """Write `<name>.tar.gz` into `sdist_dir` (atomically) and return its path."""
    name = sdist_name(project)
    sdist_dir.mkdir(parents=True, exist_ok=True)
    path = sdist_dir / f"{name}.tar.gz"
    pkg_info = metadata_text(project, project.version).encode("utf-8")
    with (
        atomic_path(path) as tmp,
        open(tmp, "wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for file in sdist_files(project):
            arcname = f"{name}/{file.relative_to(project.root).as_posix()}"
            tar.add(str(file), arcname=arcname, recursive=False, filter=_normalise)
        info = tarfile.TarInfo(f"{name}/PKG-INFO")
        info.size = len(pkg_info)
        info.mode = 0o644
        tar.addfile(info, io.BytesIO(pkg_info))
    return path


def _normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info
