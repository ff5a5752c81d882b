"""Installs: a build's staged files into the package, each copied atomically.

`install_inplace` puts a finished build's libraries, generated files and record into the
package (what `kernelpack build --inplace` and an editable install do; a wheel packs the
staged files instead). Each copy goes to a temporary name in the destination folder, then
`os.replace`.

A reader (or a crash, or Ctrl-C) sees the old file or the new one, never half of either.
An unchanged file (same size and mtime as its source) is left alone, which keeps a no-op
build from touching the package. A temporary file that a killed build left behind
(`._C.abi3.so.k3j9x_2a`) is removed by the next build (`remove_stale_temps`), and a library
is installed only once it reads as a whole shared library (`library_problem`).
"""

from __future__ import annotations

import re
import stat
from contextlib import nullcontext
from pathlib import Path

from elftools.elf.elffile import ELFFile

from kernelpack.builder.lock import build_lock
from kernelpack.builder.outputs import (
    STUB_HEADER,
    BuildResult,
    library_path,
    unavailable_stub_path,
)
from kernelpack.errors import BuildError
from kernelpack_runtime._files import copy_atomic, temp_pattern
from kernelpack_runtime.record import FILENAME as RECORD_FILENAME

__all__ = [
    "LIBRARY_TEMP",
    "install_file",
    "install_inplace",
    "install_library",
    "library_problem",
    "read_bytes",
    "remove_stale_temps",
    "temp_of",
]

#: A temporary copy of a kernel library: `._C.abi3.so.3f9a0c1e`, `._C.cpython-311-….so.…`.
LIBRARY_TEMP = temp_pattern(r"_C(\.[^/]*)?\.so")


def temp_of(name: str) -> re.Pattern[str]:
    """The names of the temporary files an atomic write of the file `name` goes through
    (`kernelpack_runtime._files` names them)."""
    return temp_pattern(re.escape(name))


def install_inplace(result: BuildResult) -> list[Path]:
    """Copy each staged library into `<pkg>/<kernel>/` and write `<pkg>/_kernelpack.json`.

    Each copy is atomic; a library of another ABI left from an earlier build (e.g. a classic
    `_C.cpython-311-….so` that would shadow a new `_C.abi3.so`) is removed afterwards.
    Returns the files that changed.
    """
    timeout = result.plan.environment.lock_timeout
    with build_lock(result.build_dir, timeout) if result.build_dir else nullcontext():
        try:
            return _install(result)
        except OSError as exc:
            raise BuildError(f"{exc.filename or 'install'}: {exc.strerror or exc}") from None


def _install(result: BuildResult) -> list[Path]:
    package_dir = result.plan.manifest.package_dir
    changed: list[Path] = []
    for name, staged in result.libraries.items():
        kernel = result.plan.kernel(name)
        destination = package_dir / library_path(kernel, package_dir)
        if install_library(staged, destination):
            changed.append(destination)
        stub = package_dir / unavailable_stub_path(kernel, package_dir)
        if read_bytes(stub) is not None and stub.read_text("utf-8", "replace").startswith(
            STUB_HEADER
        ):
            stub.unlink()  # a stand-in left by a build that skipped the kernel
            changed.append(stub)
        stale = re.compile(rf"^{re.escape(kernel.spec.module)}(\..*)?\.so$")
        for other in destination.parent.iterdir():
            if other != destination and stale.match(other.name):
                other.unlink()
                changed.append(other)
    for relative, staged in result.generated.items():
        destination = package_dir / relative
        if install_file(staged, destination):
            changed.append(destination)
    record_path = package_dir / RECORD_FILENAME
    text = result.record.dumps()
    if read_bytes(record_path) != text.encode("utf-8"):
        result.record.write(record_path)
        changed.append(record_path)
    return changed


def read_bytes(path: Path) -> bytes | None:
    """The content of the regular file `path`; None for anything else."""
    try:
        if not path.is_file():
            return None
        return path.read_bytes()
    except OSError:
        return None


def install_file(source: Path, destination: Path) -> bool:
    """Copy `source` to `destination` atomically; return False when it was already there."""
    if _same(source, destination):
        return False
    copy_atomic(source, destination)
    return True


def install_library(staged: Path, destination: Path) -> bool:
    """`install_file` for a library that must first read as a whole shared library."""
    problem = library_problem(staged)
    if problem is not None:
        raise BuildError(f"{staged}: {problem}; not installed over {destination}")
    return install_file(staged, destination)


def library_problem(path: Path) -> str | None:
    """Why `path` is not a complete ELF shared library (truncated, not ELF, not a regular
    file); None when its header, program headers and sections all lie within the file."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    size = info.st_size
    try:
        with path.open("rb") as fh:
            elf = ELFFile(fh)
            header = elf.header
            if header["e_type"] != "ET_DYN":
                return "not a shared library"
            tables = (
                (header["e_phoff"], header["e_phnum"] * header["e_phentsize"]),
                (header["e_shoff"], header["e_shnum"] * header["e_shentsize"]),
            )
            if any(offset + length > size for offset, length in tables) or header["e_shnum"] == 0:
                return f"truncated ({size} bytes)"
            for segment in elf.iter_segments():
                if segment["p_offset"] + segment["p_filesz"] > size:
                    return f"truncated ({size} bytes)"
            for section in elf.iter_sections():
                if section["sh_type"] == "SHT_NOBITS":
                    continue
                if section["sh_offset"] + section["sh_size"] > size:
                    return f"truncated ({size} bytes)"
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    except Exception:  # pyelftools on arbitrary bytes: any parse error means not whole
        return f"not an ELF shared library ({size} bytes)"
    return None


def remove_stale_temps(folder: Path, pattern: re.Pattern[str]) -> list[Path]:
    """Remove the files of `folder` (not below it) whose whole name matches `pattern`: the
    temporary files of atomic writes that a killed build left. Returns what was removed."""
    removed: list[Path] = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed
    for entry in entries:
        if not pattern.fullmatch(entry.name) or entry.is_dir():
            continue
        try:
            entry.unlink()
        except FileNotFoundError:
            continue
        removed.append(entry)
    return removed


def _same(source: Path, destination: Path) -> bool:
    try:
        a, b = source.stat(), destination.stat()
    except FileNotFoundError:
        return False
    return a.st_size == b.st_size and a.st_mtime_ns == b.st_mtime_ns
