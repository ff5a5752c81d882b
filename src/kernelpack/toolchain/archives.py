"""The cache of verified dependency archives: fetched once, checked, unpacked safely.

An `Archive` is a file kernelpack knows by name and sha256 (a tagged source archive, a
wheel). `ArchiveCache.unpacked` gives the folder it unpacks to, below the cache
(`<cache>/deps/<stem>-<sha256 prefix>/`, so an entry is named by its content), fetching it
first when that folder is not there:

- the file is read from its source (an http(s) or `file://` URL, or a folder of a mirror)
  into a hidden temporary file next to the entry, hashed as it is written, and checked
  against the table's sha256 before anything is unpacked: a wrong digest is a one-line
  `ArchiveError` naming the archive and both digests;
- every member is checked before any is written: an absolute path, a `..` part, a link
  (symbolic or hard) leaving the folder, a device or a FIFO refuses the whole archive
  (Python's `data` extraction filter then applies to what is unpacked);
- it is unpacked into a hidden temporary folder, which is renamed into place: a reader sees
  the whole entry or none, and an interrupted fill leaves only hidden temporaries, removed
  by the next fill of that entry;
- fills of one entry are serialised by a file lock (`filelock`: dropped by the kernel when
  its holder dies), so concurrent builds fetch it once and both succeed.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import shutil
import stat
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from filelock import FileLock, Timeout

from kernelpack.errors import ArchiveError, DownloadError, UsageError
from kernelpack_runtime._files import TEMP_SUFFIX

__all__ = ["Archive", "ArchiveCache", "Opener", "check_members", "open_source", "sha256_of"]

#: Seconds a fetch waits for a server before giving up.
_TIMEOUT = 60.0
_CHUNK = 1 << 20
_FOLDER_MODE = 0o755

#: Opens a source (URL or path) for reading; tests hand in their own.
Opener = Callable[[str], BinaryIO]


@dataclass(frozen=True)
class Archive:
    """A file kernelpack unpacks only when its sha256 is `sha256`."""

    filename: str
    """Its name, in a mirror too: `cutlass-4.0.0.tar.gz`."""
    sha256: str
    """Lower-case hex digest."""
    url: str
    """Where it is published."""

    @property
    def entry(self) -> str:
        """The cache folder's name: `cutlass-4.0.0-44a121c587882787`."""
        stem = re.sub(r"(\.tar\.gz|\.tgz|\.tar|\.whl|\.zip)$", "", self.filename)
        return f"{stem}-{self.sha256[:16]}"

    def source(self, mirror: str | None) -> str:
        """Where to read it: the mirror's copy (a folder or a URL) when set, else `url`."""
        if mirror is None:
            return self.url
        if "://" in mirror:
            return mirror.rstrip("/") + "/" + self.filename
        return str(Path(mirror) / self.filename)


def sha256_of(path: Path) -> str:
    """The sha256 hex digest of the file at `path`."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def open_source(source: str) -> BinaryIO:
    """Open `source` (an http(s) or `file://` URL, or a path) for reading; `DownloadError`
    (one line) when it cannot be."""
    try:
        if "://" in source:
            # http(s) and file URLs only: BuildEnvironment checks the mirror's scheme
            response: BinaryIO = urllib.request.urlopen(source, timeout=_TIMEOUT)
            return response
        return Path(source).open("rb")
    except urllib.error.HTTPError as exc:
        raise DownloadError(f"{source}: HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        raise DownloadError(f"{source}: {exc.reason}") from None
    except OSError as exc:
        raise DownloadError(f"{source}: {exc.strerror or exc}") from None


@dataclass(frozen=True)
class ArchiveCache:
    """Unpacked archives below `root` (`<kernelpack cache>/deps`)."""

    root: Path
    lock_timeout: float = 1800.0
    """Seconds to wait for another process filling the same entry."""
    opener: Opener = open_source
    announce: Callable[[str], None] | None = None
    """Gets one line before a fetch (`kernelpack: fetching …`)."""

    def has(self, archive: Archive) -> bool:
        """Whether `archive` is unpacked in the cache already."""
        return (self.root / archive.entry).is_dir()

    def unpacked(self, archive: Archive, mirror: str | None = None) -> Path:
        """The folder `archive` unpacks to, fetched from `archive.source(mirror)`, checked and
        unpacked first when it is not in the cache yet."""
        final = self.root / archive.entry
        if final.is_dir():
            return final
        self.root.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self.root / f".{archive.entry}.lock"))
        try:
            with lock.acquire(timeout=self.lock_timeout):
                if not final.is_dir():
                    self._fill(archive, archive.source(mirror), final)
        except Timeout:
            raise UsageError(
                f"{final}: another process has been filling it for {self.lock_timeout:.0f} s; "
                "raise KERNELPACK_LOCK_TIMEOUT or wait for it"
            ) from None
        return final

    def _fill(self, archive: Archive, source: str, final: Path) -> None:
        _remove_leftovers(self.root, archive.entry)
        if self.announce is not None:
            self.announce(f"kernelpack: fetching {archive.filename} from {source} into {final}")
        fd, name = tempfile.mkstemp(dir=self.root, prefix=f".{archive.entry}.")
        download = Path(name)
        try:
            with os.fdopen(fd, "wb") as sink, self.opener(source) as stream:
                digest = _copy_hashed(stream, sink, source)
            if digest != archive.sha256:
                raise ArchiveError(
                    f"{archive.filename} from {source}: sha256 {digest}, expected "
                    f"{archive.sha256} (kernelpack's table); nothing was unpacked"
                )
            staging = Path(tempfile.mkdtemp(dir=self.root, prefix=f".{archive.entry}."))
            try:
                _unpack(download, staging, archive.filename)
                # mkdtemp's folder is private; an entry is as readable as any other folder
                os.chmod(staging, _FOLDER_MODE)
                os.rename(staging, final)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        finally:
            download.unlink(missing_ok=True)


def _copy_hashed(stream: BinaryIO, sink: BinaryIO, source: str) -> str:
    digest = hashlib.sha256()
    try:
        for chunk in iter(lambda: stream.read(_CHUNK), b""):
            digest.update(chunk)
            sink.write(chunk)
    except (OSError, urllib.error.URLError) as exc:
        raise DownloadError(f"{source}: {exc}") from None
    return digest.hexdigest()


def _remove_leftovers(root: Path, entry: str) -> None:
    """Hidden temporaries of an earlier fill of `entry` that was killed (we hold its lock)."""
    pattern = re.compile(re.escape(f".{entry}") + TEMP_SUFFIX)
    for path in root.iterdir():
        if pattern.fullmatch(path.name):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def _unpack(archive: Path, destination: Path, shown: str) -> None:
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as bundle:
            for info in bundle.infolist():
                _check_zip_member(info, shown)
            bundle.extractall(destination)
        return
    if not hasattr(tarfile, "data_filter"):
        raise UsageError(
            f"{shown}: this Python ({sys.version.split()[0]}) lacks tarfile's extraction "
            "filters; use Python 3.10.12, 3.11.4 or newer"
        )
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            check_members(members, destination, shown)
            tar.extractall(destination, members=members, filter="data")
    except tarfile.TarError as exc:
        raise ArchiveError(f"{shown}: not a readable tar or zip archive ({exc})") from None


def check_members(members: list[tarfile.TarInfo], destination: Path, shown: str) -> None:
    """Refuse (`ArchiveError`, one line) a tar archive any of whose `members` would land
    outside `destination`: an absolute path, a `..` part, a link leaving the folder, a
    hard link, a device or a FIFO; then Python's `data` filter has its say."""
    for member in members:
        problem = _member_problem(member)
        if problem is None:
            try:
                tarfile.data_filter(member, str(destination))
            except tarfile.FilterError as exc:
                problem = str(exc)
        if problem is not None:
            raise ArchiveError(f"{shown}: member {member.name!r} {problem}; nothing was unpacked")


def _member_problem(member: tarfile.TarInfo) -> str | None:
    problem = _path_problem(member.name)
    if problem is not None:
        return problem
    if member.islnk():
        return f"is a hard link (to {member.linkname!r})"
    if member.issym():
        target = member.linkname
        joined = posixpath.normpath(posixpath.join(posixpath.dirname(member.name), target))
        if target.startswith("/") or joined == ".." or joined.startswith("../"):
            return f"is a link leaving the archive's folder (to {target!r})"
        return None
    if not (member.isfile() or member.isdir()):
        return "is a device, FIFO or other special file"
    return None


def _path_problem(name: str) -> str | None:
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name) or "\\" in name:
        return "has an absolute path"
    if ".." in name.split("/"):
        return "has a '..' part"
    return None


def _check_zip_member(info: zipfile.ZipInfo, shown: str) -> None:
    problem = _path_problem(info.filename)
    mode = info.external_attr >> 16
    if problem is None and stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
        problem = "is a link or special file"
    if problem is not None:
        raise ArchiveError(f"{shown}: member {info.filename!r} {problem}; nothing was unpacked")
