"""Just enough ELF to decide, before dlopen, whether a library is whole and where it registers.

Like packaging's `_elffile.py`: a small reader of the headers the standard library cannot
give, bounds-checked everywhere (every offset and size is compared with the file before it is
used), so no file content can make it raise anything but `OSError` or read past the end. The
runtime does not depend on pyelftools (a test-time dependency).

Two questions:

- Is the file truncated? dlopen does not say: the loader maps pages past the end of the file
  and the first touch kills the process with SIGBUS.
- Which torch op namespaces do its static initialisers register? torch's registration macros
  leave local symbols named after the namespace (`TORCH_LIBRARY_init_<ns>`,
  `TORCH_LIBRARY_FRAGMENT_static_init_<ns>_<uid>`, and the `STABLE_` forms), found in the
  symbol string tables. A library stripped of its local symbols answers "unknown".
"""

from __future__ import annotations

import errno
import os
import re
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["ElfLibrary", "Registration", "inspect_library"]

_MAGIC = b"\x7fELF"
_PT_LOAD = 1
_SHT_SYMTAB, _SHT_DYNSYM = 2, 11
#: String tables larger than this are not read for registrations (no real kernel library
#: comes near; the bound keeps a hostile file from costing a long read).
_MAX_STRINGS = 256 * 1024 * 1024

_REGISTRATION = re.compile(
    rb"(\d+)((?:STABLE_)?TORCH_LIBRARY_(FRAGMENT_)?(?:static_)?init_[A-Za-z0-9_]*)"
)
_UID = re.compile(r"_\d+$")


@dataclass(frozen=True)
class Registration:
    """One `TORCH_LIBRARY`-style registration of a library: `def` owns the namespace (a second
    owner aborts the process), `fragment` adds ops to it (a duplicate op aborts it too)."""

    kind: Literal["def", "fragment"]
    namespace: str


@dataclass(frozen=True)
class ElfLibrary:
    """What the headers of an ELF file say."""

    size: int
    problem: str | None
    """Why the file cannot be a whole library (truncated, inconsistent headers), or None."""
    registrations: tuple[Registration, ...] | None
    """The namespaces its static initialisers register; None when unknown (no symbols)."""

    @property
    def namespaces(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.namespace for r in self.registrations or ()))


class _Reader:
    def __init__(self, fd: int, size: int) -> None:
        self.fd, self.size = fd, size

    def read(self, offset: int, length: int) -> bytes | None:
        """Exactly `length` bytes at `offset`, or None when the file does not hold them."""
        if offset < 0 or length < 0 or offset + length > self.size:
            return None
        data = os.pread(self.fd, length, offset)
        return data if len(data) == length else None


def _open_regular(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file")
    return fd


def inspect_library(path: Path) -> ElfLibrary | None:
    """The ELF facts of `path`, or None when it is no ELF file at all (dlopen says best what
    it is). `OSError` when it cannot be read or is not a regular file."""
    fd = _open_regular(path)
    try:
        return _inspect(_Reader(fd, os.fstat(fd).st_size))
    finally:
        os.close(fd)


def _inspect(file: _Reader) -> ElfLibrary | None:
    ident = os.pread(file.fd, 16, 0)
    if ident[:4] != _MAGIC:
        return None
    if len(ident) < 16:
        return ElfLibrary(file.size, _truncated(file.size, 16), None)
    if ident[4] not in (1, 2) or ident[5] not in (1, 2):
        return ElfLibrary(file.size, "its ELF header is invalid (class or byte order)", None)
    wide, order = ident[4] == 2, "<" if ident[5] == 1 else ">"
    header_size = 64 if wide else 52
    header = file.read(0, header_size)
    if header is None:
        return ElfLibrary(file.size, _truncated(file.size, header_size), None)
    if wide:
        phoff, shoff = struct.unpack_from(f"{order}QQ", header, 32)
        phentsize, phnum, shentsize, shnum = struct.unpack_from(f"{order}HHHH", header, 54)
    else:
        phoff, shoff = struct.unpack_from(f"{order}II", header, 28)
        phentsize, phnum, shentsize, shnum = struct.unpack_from(f"{order}HHHH", header, 42)
    ph_size, sh_size = (56, 64) if wide else (32, 40)
    if (phnum and phentsize != ph_size) or (shnum and shentsize != sh_size):
        return ElfLibrary(file.size, "its ELF header is invalid (table entry sizes)", None)
    needed = max(phoff + ph_size * phnum, shoff + sh_size * shnum, header_size)
    if file.size < needed:
        return ElfLibrary(file.size, _truncated(file.size, needed), None)
    table = file.read(phoff, ph_size * phnum) or b""
    for at in range(0, len(table), ph_size):
        if struct.unpack_from(f"{order}I", table, at)[0] != _PT_LOAD:
            continue
        if wide:
            (offset,) = struct.unpack_from(f"{order}Q", table, at + 8)
            (filesz,) = struct.unpack_from(f"{order}Q", table, at + 32)
        else:
            (offset,) = struct.unpack_from(f"{order}I", table, at + 4)
            (filesz,) = struct.unpack_from(f"{order}I", table, at + 16)
        needed = max(needed, offset + filesz)
    if file.size < needed:
        return ElfLibrary(file.size, _truncated(file.size, needed), None)
    sections = file.read(shoff, sh_size * shnum) or b""
    return ElfLibrary(file.size, None, _registrations(file, sections, wide, order))


def _truncated(size: int, needed: int) -> str:
    return f"is truncated ({size} bytes; its ELF headers need {needed})"


def _registrations(
    file: _Reader, sections: bytes, wide: bool, order: str
) -> tuple[Registration, ...] | None:
    """Registrations named in the string tables of the symbol tables (None: no symbols)."""
    entry = 64 if wide else 40
    layout = f"{order}IIQQQQIIQQ" if wide else f"{order}IIIIIIIIII"
    headers = [struct.unpack_from(layout, sections, at) for at in range(0, len(sections), entry)]
    found: dict[Registration, None] = {}
    has_symbols = False
    for header in headers:
        kind, link = header[1], header[6]
        if kind not in (_SHT_SYMTAB, _SHT_DYNSYM) or link >= len(headers):
            continue
        strings = headers[link]
        offset, size = strings[4], strings[5]
        if size > _MAX_STRINGS:
            continue
        data = file.read(offset, size)
        if data is None:
            continue
        has_symbols = has_symbols or kind == _SHT_SYMTAB
        if b"TORCH_LIBRARY" in data:
            for registration in _parse(data):
                found.setdefault(registration, None)
    if not found and not has_symbols:
        return None
    return tuple(found)


def _parse(strings: bytes) -> list[Registration]:
    """Registrations in mangled local names such as `_ZL21TORCH_LIBRARY_init__CRN5torch7…`:
    the length prefix says where the identifier (and so the namespace) ends."""
    found = []
    for match in _REGISTRATION.finditer(strings):
        digits, tail = match.group(1).decode(), match.group(2).decode()
        identifier = None
        for start in range(len(digits)):  # "143" may be "1" + "43": the longest that fits
            length = int(digits[start:])
            if 0 < length <= len(tail):
                identifier = tail[:length]
                break
        if identifier is None:
            continue
        fragment = match.group(3) is not None
        _, _, namespace = identifier.partition("init_")
        if fragment:
            namespace = _UID.sub("", namespace)
        if namespace.isidentifier():
            found.append(Registration("fragment" if fragment else "def", namespace))
    return found
