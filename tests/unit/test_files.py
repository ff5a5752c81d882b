"""The one atomic-write helper: the old file or the new one, never half, never a leftover."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from kernelpack.backend._tree import is_temporary
from kernelpack.builder.install import LIBRARY_TEMP, temp_of
from kernelpack_runtime._files import atomic_path, copy_atomic, temp_pattern, write_text_atomic


def test_written_file_gets_a_plain_files_mode_not_mkstemps_private_one(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "record.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "record.json").stat().st_mode) == 0o644


def test_an_error_while_writing_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "lib.so"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as temp:
        temp.write_text("half")
        raise RuntimeError("interrupted")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lib.so"]


def test_copy_keeps_the_source_mode(tmp_path: Path) -> None:
    source = tmp_path / "a.so"
    source.write_bytes(b"\x7fELF")
    source.chmod(0o755)
    copy_atomic(source, tmp_path / "out" / "a.so")
    assert stat.S_IMODE((tmp_path / "out" / "a.so").stat().st_mode) == 0o755


def test_the_temporary_name_the_writer_makes_is_the_one_every_cleaner_recognises(
    tmp_path: Path,
) -> None:
    for name in ("_C.abi3.so", "_kernelpack.json"):
        with atomic_path(tmp_path / name) as temp:
            assert temp_pattern(re.escape(name)).fullmatch(temp.name)
            assert temp_of(name).fullmatch(temp.name)
            assert is_temporary(temp.name)
            if name.startswith("_C"):
                assert LIBRARY_TEMP.fullmatch(temp.name)
