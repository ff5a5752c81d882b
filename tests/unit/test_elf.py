"""`kernelpack_runtime._elf`: whole-library checks before dlopen, cross-checked with pyelftools.

A library whose headers lie is mapped as they say and its initialisers run, which kills the
process (SIGSEGV) instead of failing; each corruption below did so before it was checked.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from kernelpack_runtime._elf import Registration, inspect_library

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to link a .so")


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("elf")
    source = folder / "good.cpp"
    source.write_text(
        "int table[20000] = {1};\n"
        'extern "C" int get(int i) { return table[i]; }\n'
        "static void TORCH_LIBRARY_init__C(int& m) { m += table[1]; }\n"
        "static void TORCH_LIBRARY_FRAGMENT_init_my_ops_3(int& m) { m += table[2]; }\n"
        'extern "C" void (*keep[])(int&) = {&TORCH_LIBRARY_init__C,'
        " &TORCH_LIBRARY_FRAGMENT_init_my_ops_3};\n"
    )
    library = folder / "good.so"
    subprocess.run(["g++", "-O2", "-shared", "-fPIC", str(source), "-o", str(library)], check=True)
    return library


def _segments(path: Path) -> list[tuple[str, int]]:
    """(p_type, file offset of the header) of each program header, from pyelftools."""
    with path.open("rb") as fh:
        elf = ELFFile(fh)
        start, size = elf["e_phoff"], elf["e_phentsize"]
        return [(seg["p_type"], start + i * size) for i, seg in enumerate(elf.iter_segments())]


def _corrupt(
    good: Path, tmp_path: Path, edit: Callable[[bytearray, list[tuple[str, int]]], None]
) -> Path:
    data = bytearray(good.read_bytes())
    edit(data, _segments(good))
    target = tmp_path / "bad.so"
    target.write_bytes(bytes(data))
    return target


Edit = Callable[[bytearray, list[tuple[str, int]]], None]


def _field(
    kind: str, offset_in_header: int, value: int, fmt: str = "<Q", index: int | None = None
) -> Edit:
    """Overwrite one field of a program header of `kind`: the `index`th, or by default the
    last LOAD, else the first."""

    def edit(data: bytearray, segments: list[tuple[str, int]]) -> None:
        at = [start for name, start in segments if name == kind][
            index if index is not None else -1 if kind == "PT_LOAD" else 0
        ]
        struct.pack_into(fmt, data, at + offset_in_header, value)

    return edit


def _shrunk_file_size(index: int, by: int) -> Edit:
    """The `index`th LOAD keeps its memory size but `by` fewer bytes come from the file."""

    def edit(data: bytearray, segments: list[tuple[str, int]]) -> None:
        at = [start for name, start in segments if name == "PT_LOAD"][index]
        (filesz,) = struct.unpack_from("<Q", data, at + 32)
        struct.pack_into("<Q", data, at + 32, filesz - by)

    return edit


def _read_only_data(data: bytearray, segments: list[tuple[str, int]]) -> None:
    """The last LOAD (data, GOT, dynamic section) loses its write flag and its zero-filled
    tail, so only the flag is wrong."""
    at = [start for name, start in segments if name == "PT_LOAD"][-1]
    struct.pack_into("<I", data, at + 4, 4)
    (filesz,) = struct.unpack_from("<Q", data, at + 32)
    struct.pack_into("<Q", data, at + 40, filesz)


def test_a_whole_library_passes_and_names_its_registrations(good: Path) -> None:
    library = inspect_library(good)
    assert library is not None and library.problem is None
    assert set(library.registrations or ()) == {
        Registration("def", "_C"),
        Registration("fragment", "my_ops"),
    }


def test_a_stripped_library_has_unknown_registrations(good: Path, tmp_path: Path) -> None:
    stripped = tmp_path / "stripped.so"
    subprocess.run(["strip", "-o", str(stripped), str(good)], check=True)
    library = inspect_library(stripped)
    assert library is not None and library.problem is None
    assert library.registrations is None


def test_a_text_file_is_no_elf_at_all(tmp_path: Path) -> None:
    (tmp_path / "x.so").write_text("INPUT(-lfoo)\n")
    assert inspect_library(tmp_path / "x.so") is None


def _relro_to_the_page_end(data: bytearray, segments: list[tuple[str, int]]) -> None:
    """RELRO ends where the pages of the writable LOAD end, as lld writes it."""
    load = [start for name, start in segments if name == "PT_LOAD"][-1]
    relro = next(start for name, start in segments if name == "PT_GNU_RELRO")
    vaddr, memsz, align = (struct.unpack_from("<Q", data, load + at)[0] for at in (16, 40, 48))
    (start,) = struct.unpack_from("<Q", data, relro + 16)
    page_end = -(-(vaddr + memsz) // align) * align
    struct.pack_into("<Q", data, relro + 40, page_end - start)


def test_relro_rounded_up_to_the_page_passes(good: Path, tmp_path: Path) -> None:
    library = inspect_library(_corrupt(good, tmp_path, _relro_to_the_page_end))
    assert library is not None and library.problem is None


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        pytest.param(_field("PT_LOAD", 8, 0x7000), "truncated", id="last-load-offset"),
        pytest.param(_field("PT_GNU_RELRO", 40, 1 << 20), "outside the loaded image", id="relro"),
        pytest.param(_field("PT_DYNAMIC", 0, 0x12345678, "<I"), "unknown segment type", id="type"),
        pytest.param(_field("PT_DYNAMIC", 0, 0, "<I"), "dynamic segment", id="no-dynamic"),
        pytest.param(_field("PT_LOAD", 4, 0x40, "<I"), "segment flags", id="flags"),
        pytest.param(_field("PT_LOAD", 48, 3), "segment sizes", id="align"),
        # Found by test_registry_fuzz: each of these killed the process in dlopen.
        pytest.param(_shrunk_file_size(0, 12), "segment sizes", id="read-only-tail"),
        pytest.param(_shrunk_file_size(1, 256), "segment sizes", id="code-tail"),
        pytest.param(_field("PT_LOAD", 4, 5, "<I"), "segment sizes", id="data-not-writable"),
        pytest.param(_read_only_data, "dynamic segment", id="dynamic-not-writable"),
    ],
)
def test_lying_program_headers_are_invalid(
    good: Path,
    tmp_path: Path,
    edit: Callable[[bytearray, list[tuple[str, int]]], None],
    problem: str,
) -> None:
    library = inspect_library(_corrupt(good, tmp_path, edit))
    assert library is not None and library.problem is not None
    assert problem in library.problem


@pytest.mark.parametrize("size", range(0, 200, 7))
def test_any_prefix_gives_an_answer(good: Path, tmp_path: Path, size: int) -> None:
    target = tmp_path / "cut.so"
    target.write_bytes(good.read_bytes()[:size])
    library = inspect_library(target)
    assert library is None or library.problem is not None
