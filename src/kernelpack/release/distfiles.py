"""The files of one release, as `kernelpack index` reads them: kernel wheels and the sdist.

A kernel wheel is one kernelpack built: its version carries a variant label
(`0.1.0+cu130stable2.10`, see `kernelpack.abitag`) and its package holds the build record
`<pkg>/_kernelpack.json`. Everything is checked before anything is written: wheels and sdists
of one project and one version, each a readable zip or tar with valid core metadata.
"""

from __future__ import annotations

import tarfile
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.metadata import ExceptionGroup, InvalidMetadata, Metadata
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    NormalizedName,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from kernelpack.abitag import AbiTag
from kernelpack.errors import UsageError
from kernelpack_runtime.record import FILENAME as RECORD_FILENAME
from kernelpack_runtime.record import MAX_BYTES, BuildRecord, InvalidRecord

__all__ = ["KernelWheel", "Release", "Sdist", "read_release"]

# Core metadata is a few kB; a member far larger is not one (and must not cost a slow read).
_MAX_METADATA = 4 * 1024 * 1024


@dataclass(frozen=True)
class KernelWheel:
    """One kernel wheel of the release, with what the channels need from inside it."""

    path: Path
    name: NormalizedName
    version: Version
    """The full version, variant label included (`0.1.0+cu130stable2.10`)."""
    abi: AbiTag
    tag: str
    """The compatibility tag part of the file name (`cp310-abi3-manylinux_2_34_x86_64`)."""
    dist_info: str
    """Its `.dist-info` folder (`llm_ops-0.1.0+cu130stable2.10.dist-info`)."""
    package: str
    """The import package folder holding the build record (`llm_ops`)."""
    metadata: bytes
    """The `METADATA` member, as it is."""
    requires_python: str | None
    record: BuildRecord

    @property
    def label(self) -> str:
        """The variant label (`cu130stable2.10`)."""
        return str(self.abi)

    @property
    def cuda(self) -> str:
        """The CUDA label (`cu130`): the variant index this wheel belongs to."""
        return self.abi.cuda


@dataclass(frozen=True)
class Sdist:
    """The release's source distribution (its version is the plain project version)."""

    path: Path
    name: NormalizedName
    version: Version
    metadata: bytes
    requires_python: str | None


@dataclass(frozen=True)
class Release:
    """Every file of one release: one project, one version."""

    name: NormalizedName
    version: Version
    """The public version (`0.1.0`), what PyPI and the variant wheels carry."""
    wheels: tuple[KernelWheel, ...]
    sdist: Sdist | None

    @property
    def labels(self) -> tuple[str, ...]:
        """Every variant label, sorted."""
        return tuple(sorted({wheel.label for wheel in self.wheels}))


def _files(paths: Iterable[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            inside = sorted(p for p in path.iterdir() if p.name.endswith((".whl", ".tar.gz")))
            if not inside:
                raise UsageError(f"{path}: holds no wheel (*.whl) and no sdist (*.tar.gz)")
            found.extend(inside)
        elif path.is_file():
            found.append(path)
        else:
            raise UsageError(f"{path}: no such file or folder")
    return found


def _metadata(path: Path, member: str, data: bytes) -> Metadata:
    try:
        return Metadata.from_email(data, validate=True)
    except (InvalidMetadata, ExceptionGroup, ValueError) as exc:
        problem = exc.exceptions[0] if isinstance(exc, ExceptionGroup) else exc
        raise UsageError(f"{path}: {member}: invalid core metadata ({problem})") from None


def _member(archive: zipfile.ZipFile, path: Path, name: str) -> bytes:
    info = archive.getinfo(name)
    if info.file_size > _MAX_METADATA:
        raise UsageError(f"{path}: {name}: {info.file_size} bytes is too large to be metadata")
    return archive.read(info)


def read_wheel(path: Path) -> KernelWheel:
    """Read and check one kernel wheel; `UsageError` (one line naming the file) otherwise."""
    try:
        name, version, _build, _tags = parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        raise UsageError(f"{path}: not a wheel file name ({exc})") from None
    abi = AbiTag.of_version(version)
    if abi is None:
        raise UsageError(
            f"{path}: not a kernelpack wheel: version {version} carries no variant label "
            "(e.g. 0.1.0+cu130stable2.10)"
        )
    dist_info = f"{path.name.split('-')[0]}-{path.name.split('-')[1]}.dist-info"
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            if f"{dist_info}/METADATA" not in names:
                raise UsageError(f"{path}: no {dist_info}/METADATA")
            records = [n for n in names if n.count("/") == 1 and n.endswith(f"/{RECORD_FILENAME}")]
            if len(records) != 1:
                raise UsageError(
                    f"{path}: not a kernelpack wheel: no <package>/{RECORD_FILENAME} build record"
                )
            raw = _member(archive, path, f"{dist_info}/METADATA")
            record_info = archive.getinfo(records[0])
            if record_info.file_size > MAX_BYTES:
                raise UsageError(f"{path}: {records[0]}: too large to be a build record")
            record_text = archive.read(record_info)
            bad = archive.testzip()
    except zipfile.BadZipFile as exc:
        raise UsageError(f"{path}: not a readable wheel (a corrupt zip: {exc})") from None
    except (OSError, EOFError, zipfile.LargeZipFile) as exc:
        raise UsageError(f"{path}: not a readable wheel ({exc})") from None
    if bad is not None:
        raise UsageError(f"{path}: not a readable wheel (member {bad} is corrupt)")
    meta = _metadata(path, f"{dist_info}/METADATA", raw)
    if meta.version != version or canonicalize_name(meta.name) != name:
        raise UsageError(
            f"{path}: METADATA says {meta.name} {meta.version}, the file name {name} {version}"
        )
    try:
        record = BuildRecord.loads(record_text)
    except InvalidRecord as exc:
        raise UsageError(f"{path}: {records[0]}: {exc}") from None
    return KernelWheel(
        path=path,
        name=name,
        version=version,
        abi=abi,
        tag=_tag_text(path),
        dist_info=dist_info,
        package=records[0].split("/")[0],
        metadata=raw,
        requires_python=str(meta.requires_python) if meta.requires_python else None,
        record=record,
    )


def _tag_text(path: Path) -> str:
    """The compressed tag set of a file name (`py2.py3-none-any`), as it is written."""
    return "-".join(path.name[: -len(".whl")].split("-")[-3:])


def read_sdist(path: Path) -> Sdist:
    """Read and check the sdist; `UsageError` (one line naming the file) otherwise."""
    try:
        name, version = parse_sdist_filename(path.name)
    except InvalidSdistFilename as exc:
        raise UsageError(f"{path}: not an sdist file name ({exc})") from None
    if version.local is not None:
        raise UsageError(f"{path}: an sdist carries the plain project version, not {version}")
    member = f"{path.name[: -len('.tar.gz')]}/PKG-INFO"
    try:
        with tarfile.open(path, "r:gz") as archive:
            info = archive.getmember(member)
            handle = archive.extractfile(info) if info.size <= _MAX_METADATA else None
            if handle is None:
                raise UsageError(f"{path}: {member} is not a regular file of metadata size")
            raw = handle.read()
    except KeyError:
        raise UsageError(f"{path}: no {member}") from None
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise UsageError(f"{path}: not a readable sdist (a corrupt tar.gz: {exc})") from None
    meta = _metadata(path, member, raw)
    if meta.version != version or canonicalize_name(meta.name) != name:
        raise UsageError(
            f"{path}: PKG-INFO says {meta.name} {meta.version}, the file name {name} {version}"
        )
    return Sdist(
        path=path,
        name=name,
        version=version,
        metadata=raw,
        requires_python=str(meta.requires_python) if meta.requires_python else None,
    )


def read_release(paths: Sequence[Path]) -> Release:
    """Every wheel and sdist named by `paths` (files, or folders of them), checked to be one
    release: `UsageError` for two projects, two versions, two sdists or the same wheel twice."""
    wheels: list[KernelWheel] = []
    sdists: list[Sdist] = []
    for path in _files(paths):
        if path.name.endswith(".whl"):
            wheels.append(read_wheel(path))
        elif path.name.endswith(".tar.gz"):
            sdists.append(read_sdist(path))
        else:
            raise UsageError(f"{path}: neither a wheel (*.whl) nor an sdist (*.tar.gz)")
    if not wheels:
        raise UsageError("no kernel wheel given: pass the wheels of the release (or their folder)")
    first = wheels[0]
    public = Version(first.version.public)
    items: list[KernelWheel | Sdist] = [*wheels, *sdists]
    for item in items:
        if item.name != first.name or Version(item.version.public) != public:
            raise UsageError(
                f"{item.path}: {item.name} {Version(item.version.public)} is another release "
                f"than {first.path.name} ({first.name} {public}): index one release at a time"
            )
    seen: dict[str, Path] = {}
    for wheel in wheels:
        if wheel.path.name in seen:
            raise UsageError(f"{wheel.path}: the same wheel as {seen[wheel.path.name]}")
        seen[wheel.path.name] = wheel.path
    if len(sdists) > 1:
        raise UsageError(f"{sdists[1].path}: a second sdist (the first: {sdists[0].path})")
    return Release(
        name=first.name,
        version=public,
        wheels=tuple(wheels),
        sdist=sdists[0] if sdists else None,
    )
