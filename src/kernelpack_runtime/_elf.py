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
_ET_DYN = 3
_PT_LOAD, _PT_DYNAMIC, _PT_TLS = 1, 2, 7
_PT_GNU_STACK, _PT_GNU_RELRO = 0x6474E551, 0x6474E552
_PF_X, _PF_W, _PF_R = 1, 2, 4
#: `os.uname().machine` -> (e_machine, 64-bit, byte order) of the libraries it loads.
_HOST_MACHINES = {
    "x86_64": (62, True, "<"),
    "aarch64": (183, True, "<"),
    "ppc64le": (21, True, "<"),
    "s390x": (22, True, ">"),
}
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


@dataclass(frozen=True)
class _Segment:
    kind: int
    flags: int
    offset: int
    vaddr: int
    filesz: int
    memsz: int
    align: int


def _inspect(file: _Reader) -> ElfLibrary | None:
    ident = os.pread(file.fd, 16, 0)
    if ident[:4] != _MAGIC:
        return None
    if len(ident) < 16:
        return ElfLibrary(file.size, _truncated(file.size, 16), None)
    if ident[4] not in (1, 2) or ident[5] not in (1, 2) or ident[6] != 1:
        return _invalid(file, "class, byte order or version")
    wide, order = ident[4] == 2, "<" if ident[5] == 1 else ">"
    header_size = 64 if wide else 52
    header = file.read(0, header_size)
    if header is None:
        return ElfLibrary(file.size, _truncated(file.size, header_size), None)
    kind, machine, version = struct.unpack_from(f"{order}HHI", header, 16)
    if wide:
        phoff, shoff = struct.unpack_from(f"{order}QQ", header, 32)
        ehsize, phentsize, phnum, shentsize, shnum = struct.unpack_from(f"{order}HHHHH", header, 52)
    else:
        phoff, shoff = struct.unpack_from(f"{order}II", header, 28)
        ehsize, phentsize, phnum, shentsize, shnum = struct.unpack_from(f"{order}HHHHH", header, 40)
    if kind != _ET_DYN or version != 1 or ehsize != header_size:
        return _invalid(file, "not a shared library")
    host = _HOST_MACHINES.get(os.uname().machine)
    if host is not None and (machine, wide, order) != host:
        return _invalid(file, f"built for another machine (e_machine {machine})")
    ph_size, sh_size = (56, 64) if wide else (32, 40)
    if phentsize != ph_size or not phnum or (shnum and shentsize != sh_size):
        return _invalid(file, "table entry sizes")
    needed = max(phoff + ph_size * phnum, shoff + sh_size * shnum, header_size)
    if file.size < needed:
        return ElfLibrary(file.size, _truncated(file.size, needed), None)
    segments = _segments(file.read(phoff, ph_size * phnum) or b"", wide, order)
    for segment in segments:
        if segment.kind == _PT_LOAD:
            needed = max(needed, segment.offset + segment.filesz)
    if file.size < needed:
        return ElfLibrary(file.size, _truncated(file.size, needed), None)
    problem = _segments_problem(segments) or _dynamic_problem(file, segments, wide, order)
    if problem is not None:
        return _invalid(file, problem)
    sections = file.read(shoff, sh_size * shnum) or b""
    return ElfLibrary(file.size, None, _registrations(file, sections, wide, order))


def _invalid(file: _Reader, what: str) -> ElfLibrary:
    return ElfLibrary(file.size, f"is not a valid ELF shared library ({what})", None)


def _segments(table: bytes, wide: bool, order: str) -> list[_Segment]:
    found = []
    if wide:
        for at in range(0, len(table), 56):
            kind, flags, offset, vaddr, _, filesz, memsz, align = struct.unpack_from(
                f"{order}IIQQQQQQ", table, at
            )
            found.append(_Segment(kind, flags, offset, vaddr, filesz, memsz, align))
    else:
        for at in range(0, len(table), 32):
            kind, offset, vaddr, _, filesz, memsz, flags, align = struct.unpack_from(
                f"{order}IIIIIIII", table, at
            )
            found.append(_Segment(kind, flags, offset, vaddr, filesz, memsz, align))
    return found


def _segments_problem(segments: list[_Segment]) -> str | None:
    """What the dynamic loader would trust blindly in the program headers, checked first:
    dlopen maps what they say and runs the initialisers found through them."""
    loads = [s for s in segments if s.kind == _PT_LOAD]
    if not loads:
        return "no loadable segment"
    for segment in segments:
        if segment.kind > _PT_TLS and not 0x60000000 <= segment.kind <= 0x7FFFFFFF:
            return f"unknown segment type {segment.kind:#x}"
    previous_end, previous_file_end = -1, 0
    for load in loads:
        aligned = load.align & (load.align - 1) == 0
        if load.flags & ~0x7 or not load.flags & _PF_R:
            return "segment flags"
        if load.filesz > load.memsz or not aligned:
            return "segment sizes"
        if load.filesz != load.memsz and not load.flags & _PF_W:
            # The loader zero-fills the tail past the file bytes by writing to it; a linker
            # puts such a tail (.bss) only in a writable segment.
            return "segment sizes"
        if load.align > 1 and (load.vaddr - load.offset) % load.align:
            return "segment alignment"
        if load.vaddr < previous_end or (load.filesz and load.offset < previous_file_end):
            return "segments out of order"
        previous_end = load.vaddr + load.memsz
        previous_file_end = max(previous_file_end, load.offset + load.filesz)
    if not any(load.flags & _PF_X for load in loads):
        return "no executable segment"
    dynamics = [s for s in segments if s.kind == _PT_DYNAMIC]
    holding = _load_holding(loads, dynamics[0]) if len(dynamics) == 1 else None
    if holding is None or not holding.flags & _PF_W:
        # Relocations write the GOT and the initialiser arrays that a linker puts beside the
        # dynamic section: a read-only segment there faults in dlopen.
        return "dynamic segment"
    for part in segments:
        # What the loader maps, protects (RELRO) or reads through addresses must lie in
        # the mapped image; the stack segment (flags only) and empty ones hold nothing.
        # RELRO is protected in whole pages: lld rounds its end up to the page, past the
        # segment's bytes but not past the pages mapped for them.
        relro = part.kind == _PT_GNU_RELRO
        size = part.memsz if relro else part.filesz
        if part.kind in (_PT_LOAD, _PT_GNU_STACK) or not size:
            continue
        if not any(
            load.vaddr <= part.vaddr
            and part.vaddr + size <= (_page_end(load) if relro else load.vaddr + load.memsz)
            for load in loads
        ):
            return f"segment {part.kind:#x} outside the loaded image"
    return None


def _page_end(load: _Segment) -> int:
    """The end of the pages mapped for `load` (its alignment, at least 4 KiB pages)."""
    page = max(load.align, 4096)
    return -(-(load.vaddr + load.memsz) // page) * page


def _load_holding(loads: list[_Segment], part: _Segment) -> _Segment | None:
    """The loadable segment whose file bytes and addresses both hold `part`."""
    for load in loads:
        if (
            load.offset <= part.offset
            and part.offset + part.filesz <= load.offset + load.filesz
            and part.vaddr - load.vaddr == part.offset - load.offset
        ):
            return load
    return None


#: Dynamic tags whose value is an address in the mapped image (symbol and string tables,
#: hash tables, relocations, initialisers, version tables).
_ADDRESS_TAGS = frozenset({3, 4, 5, 6, 7, 12, 13, 17, 23, 25, 26, 0x6FFFFEF5, 0x6FFFFFF0})
_DT_INIT = 12


def _dynamic_problem(file: _Reader, segments: list[_Segment], wide: bool, order: str) -> str | None:
    """The dynamic section must end, and its addresses point into the loadable segments."""
    loads = [s for s in segments if s.kind == _PT_LOAD]
    (dynamic,) = (s for s in segments if s.kind == _PT_DYNAMIC)
    data = file.read(dynamic.offset, dynamic.filesz) or b""
    entry, layout = (16, f"{order}qQ") if wide else (8, f"{order}iI")
    for at in range(0, len(data) - entry + 1, entry):
        tag, value = struct.unpack_from(layout, data, at)
        if tag == 0:
            return None
        if tag in _ADDRESS_TAGS and not any(
            load.vaddr <= value < load.vaddr + load.memsz
            and (tag != _DT_INIT or load.flags & _PF_X)
            for load in loads
        ):
            return f"dynamic entry {tag:#x} points outside the library"
    return "unterminated dynamic section"


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
