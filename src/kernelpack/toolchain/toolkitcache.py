"""Kernelpack's cache of CUDA toolkits installed from the CUDA wheels.

`ToolkitCache(root)` holds one folder per installed toolkit, `<cuda>-<digest>` (e.g.
`13.0-3f9c…`), named by the digest of its files: the wheels of `cudawheels.requirements`
installed by the real pip (`pip install --target`; uv's pip when this interpreter has no
pip) into a temporary folder, their file list with sizes and SHA-256 digests written beside
them (`kernelpack-toolkit.json`), then the folder renamed into place. So:

- two builds that need a toolkit at once both succeed: a file lock (`filelock`) serialises
  the installs of one cache, and the second finds the first's toolkit;
- a killed install leaves only a `.tmp-*` folder, which nothing uses and the next install
  removes;
- a toolkit whose files were changed or removed since (another size or modification time
  than recorded; `verify(full=True)` compares the digests) is found broken, and the next
  install replaces it, saying so in one line;
- an index that cannot be reached is one `ToolkitError` line naming what to install by hand.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout
from packaging.version import InvalidVersion, Version

from kernelpack.errors import BuildError
from kernelpack.toolchain import cudawheels
from kernelpack_runtime._files import write_text_atomic

__all__ = ["MANIFEST", "CachedToolkit", "ToolkitCache", "ToolkitError"]

#: The file list of an installed toolkit, at the top of its folder.
MANIFEST = "kernelpack-toolkit.json"

_SCHEMA = 1
_INSTALL_TIMEOUT_S = 1800
_TEMP = ".tmp-"
_TRASH = ".trash-"


class ToolkitError(BuildError):
    """The CUDA wheels could not be installed (an unreachable index, no installer)."""


@dataclass(frozen=True)
class CachedToolkit:
    """One toolkit of the cache."""

    folder: Path
    cuda: Version
    """The CUDA release it was installed for ("13.0")."""
    versions: Mapping[str, str]
    """Wheel name -> the version installed (`nvidia-cuda-nvcc` -> "13.0.88")."""

    @property
    def root(self) -> Path:
        """The toolkit root: `<folder>/nvidia/cu<major>` (its `bin/nvcc`)."""
        return self.folder / "nvidia" / f"cu{self.cuda.major}"

    @property
    def nvcc_version(self) -> Version:
        return Version(self.versions.get("nvidia-cuda-nvcc", "0"))


class ToolkitCache:
    """The toolkits of one cache folder (default `$XDG_CACHE_HOME/kernelpack/cuda/<machine>`)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def of(cls, cache: Path, machine: str = "") -> ToolkitCache:
        """The toolkit cache below kernelpack's machine cache `cache`, for this machine."""
        return cls(cache / "cuda" / (machine or platform.machine()))

    def toolkits(self, cuda: Version) -> list[CachedToolkit]:
        """The installed toolkits for CUDA `cuda`, newest nvcc first (unverified)."""
        found = []
        for folder in sorted(self.root.glob(f"{cuda.major}.{cuda.minor}-*")):
            toolkit = _read(folder)
            if toolkit is not None and toolkit.cuda == cuda:
                found.append(toolkit)
        return sorted(found, key=lambda t: t.nvcc_version, reverse=True)

    def find(self, cuda: Version) -> tuple[CachedToolkit | None, str | None]:
        """The newest toolkit for `cuda` whose files are as installed, and None; or None and
        why the newest one is not usable (`verify`); (None, None) when there is none."""
        toolkits = self.toolkits(cuda)
        if not toolkits:
            return None, None
        problem = verify(toolkits[0].folder)
        if problem is not None:
            return None, f"{toolkits[0].folder}: {problem}"
        return toolkits[0], None

    def install(
        self,
        cuda: Version,
        environ: Mapping[str, str],
        *,
        say: Callable[[str], None],
        timeout: float = 1800.0,
        full: bool = False,
    ) -> CachedToolkit:
        """The toolkit for `cuda`, installed when the cache has none whose files are as
        installed (`full`: their digests compared too). `say` gets one line per thing
        done (installing, replacing a changed toolkit). Raises `ToolkitError`."""
        self.root.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self.root / ".lock"))
        try:
            lock.acquire(timeout=timeout)
        except Timeout:
            raise ToolkitError(
                f"another process has been installing a CUDA toolkit into {self.root} for "
                f"{timeout:.0f} s (KERNELPACK_LOCK_TIMEOUT); try again"
            ) from None
        try:
            self._remove_leftovers()
            for toolkit in self.toolkits(cuda):
                problem = verify(toolkit.folder, full=full)
                if problem is None:
                    return toolkit
                say(
                    f"kernelpack: the CUDA {cuda} toolkit in {toolkit.folder} was changed "
                    f"({problem}); reinstalling it"
                )
                self._discard(toolkit.folder)
            return self._install(cuda, environ, say)
        finally:
            lock.release()

    def _install(
        self, cuda: Version, environ: Mapping[str, str], say: Callable[[str], None]
    ) -> CachedToolkit:
        staging = Path(tempfile.mkdtemp(prefix=_TEMP, dir=self.root))
        try:
            command = _installer(staging, cuda, environ)
            say(
                f"kernelpack: installing the CUDA {cuda} wheels into {self.root} "
                f"(once; {Path(command[0]).name} {' '.join(command[1:3])})"
            )
            _run(command, environ, cuda)
            versions = _versions(staging)
            missing = [name for name in cudawheels.PACKAGES if name not in versions]
            root = staging / "nvidia" / f"cu{cuda.major}"
            if missing or not (root / "bin" / "nvcc").is_file():
                raise ToolkitError(
                    f"the CUDA {cuda} wheels installed no nvcc (missing: "
                    f"{', '.join(missing) or 'bin/nvcc'}); install them by hand: "
                    f"{cudawheels.by_hand(cuda)}"
                )
            files = _file_list(staging)
            digest = hashlib.sha256(
                json.dumps(sorted((k, v[2]) for k, v in files.items())).encode()
            ).hexdigest()[:16]
            manifest = {
                "schema": _SCHEMA,
                "cuda": str(cuda),
                "requirements": list(cudawheels.requirements(cuda)),
                "versions": versions,
                "files": files,
            }
            write_text_atomic(staging / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
            final = self.root / f"{cuda.major}.{cuda.minor}-{digest}"
            if final.exists():  # the same files, installed before and verified broken: gone
                self._discard(final)
            staging.rename(final)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        toolkit = _read(final)
        assert toolkit is not None
        return toolkit

    def _remove_leftovers(self) -> None:
        """Folders of killed installs and discarded toolkits (only the lock's holder makes
        them, so under the lock none is in use)."""
        for entry in self.root.iterdir():
            if entry.name.startswith((_TEMP, _TRASH)) and entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)

    def _discard(self, folder: Path) -> None:
        trash = Path(tempfile.mkdtemp(prefix=_TRASH, dir=self.root))
        folder.rename(trash / folder.name)
        shutil.rmtree(trash, ignore_errors=True)


def verify(folder: Path, *, full: bool = False) -> str | None:
    """Why the toolkit `folder` is not as installed (a file missing, or with another size or
    modification time than recorded; `full`: another SHA-256 digest); None when it is."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"its file list {MANIFEST} is missing or unreadable"
    for name, (size, mtime_ns, digest) in sorted(files.items()):
        path = folder / name
        try:
            stat = path.lstat()
        except OSError:
            return f"{name} is missing"
        if stat.st_size != size or stat.st_mtime_ns != mtime_ns:
            return f"{name} was changed"
        if full and _sha256(path, missing="") != digest:
            return f"{name} was changed (its digest differs)"
    return None


def _read(folder: Path) -> CachedToolkit | None:
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        cuda = Version(str(manifest["cuda"]))
        versions = {str(k): str(v) for k, v in dict(manifest["versions"]).items()}
    except (OSError, ValueError, KeyError, TypeError, InvalidVersion):
        return None
    return CachedToolkit(folder=folder, cuda=cuda, versions=versions)


def _installer(target: Path, cuda: Version, environ: Mapping[str, str]) -> list[str]:
    """The real pip of this interpreter; else uv's pip (uv's build environments and venvs
    have no pip); else a pip on PATH. The wheels are pure-Python-tagged, so any pip does."""
    wanted = cudawheels.requirements(cuda)
    flags = ["--no-deps", "--only-binary", ":all:", "--target", str(target), *wanted]
    if importlib.util.find_spec("pip") is not None:
        quiet = ["--disable-pip-version-check", "--no-input", "--no-compile", "-q"]
        return [sys.executable, "-m", "pip", "install", *quiet, *flags]
    search = environ.get("PATH", os.defpath)
    uv = environ.get("UV") or shutil.which("uv", path=search)
    if uv:
        return [uv, "pip", "install", "--python", sys.executable, "-q", *flags]
    pip = shutil.which("pip3", path=search) or shutil.which("pip", path=search)
    if pip:
        return [pip, "install", "--disable-pip-version-check", "--no-input", "-q", *flags]
    raise ToolkitError(
        f"no pip or uv to install the CUDA wheels with; install them by hand: "
        f"{cudawheels.by_hand(cuda)}"
    )


def _run(command: list[str], environ: Mapping[str, str], cuda: Version) -> None:
    try:
        proc = subprocess.run(
            command,
            env=dict(environ),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_INSTALL_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        output, code = str(exc), None
    else:
        if proc.returncode == 0:
            return
        output, code = proc.stderr + proc.stdout, proc.returncode
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("ERROR", "error"))]
    last = (errors or lines or [f"exit {code}"])[0 if errors else -1]
    raise ToolkitError(
        f"cannot install the CUDA {cuda} wheels ({Path(command[0]).name}: {last}); "
        f"install them by hand: {cudawheels.by_hand(cuda)}, or set CUDA_HOME to a CUDA "
        f"{cuda.major} toolkit"
    )


def _versions(site: Path) -> dict[str, str]:
    """Distribution name -> version of what pip installed into `site`."""
    found: dict[str, str] = {}
    for info in site.glob("*.dist-info"):
        name, _, version = info.name[: -len(".dist-info")].partition("-")
        found[name.replace("_", "-").lower()] = version
    return found


def _file_list(folder: Path) -> dict[str, list[object]]:
    files: dict[str, list[object]] = {}
    for dirpath, _, names in os.walk(folder):
        for name in names:
            path = Path(dirpath) / name
            stat = path.lstat()
            files[path.relative_to(folder).as_posix()] = [
                stat.st_size,
                stat.st_mtime_ns,
                _sha256(path),
            ]
    return files


def _sha256(path: Path, missing: str | None = None) -> str:
    """The file's SHA-256 (hex); `missing` for a file that cannot be read (None: raise)."""
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        if missing is None:
            raise
        return missing
    return digest.hexdigest()
