"""The build's compile_commands.json is where clangd looks (`build/` below the project)."""

from __future__ import annotations

import os
from pathlib import Path

from kernelpack.builder import clangd


def _build_dir(root: Path) -> Path:
    build_dir = root / "build" / "kernelpack"
    build_dir.mkdir(parents=True)
    (build_dir / "compile_commands.json").write_text("[]\n")
    return build_dir


def test_links_the_database_into_build_once(tmp_path: Path) -> None:
    build_dir = _build_dir(tmp_path)
    where = tmp_path / "build" / "compile_commands.json"
    assert clangd.link(build_dir) == where
    assert os.readlink(where) == "kernelpack/compile_commands.json"
    assert where.read_text() == "[]\n"
    assert clangd.link(build_dir) is None  # already there: nothing to say


def test_never_replaces_another_tools_database(tmp_path: Path) -> None:
    build_dir = _build_dir(tmp_path)
    theirs = tmp_path / "build" / "compile_commands.json"
    theirs.write_text('[{"file": "cmake.cpp"}]\n')
    assert clangd.link(build_dir) is None
    assert theirs.read_text() == '[{"file": "cmake.cpp"}]\n'
    theirs.unlink()
    theirs.symlink_to("elsewhere/compile_commands.json")
    assert clangd.link(build_dir) is None
    assert os.readlink(theirs) == "elsewhere/compile_commands.json"


def test_a_build_folder_elsewhere_is_left_alone(tmp_path: Path) -> None:
    build_dir = tmp_path / "out" / "kp"
    build_dir.mkdir(parents=True)
    assert clangd.link(build_dir) is None
    assert not (tmp_path / "out" / "compile_commands.json").exists()
