"""Compiler messages name files from where the user is, not from the build folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpack.builder.diagnostics import Relocator
from kernelpack.builder.graph import link_root


@pytest.fixture
def project(tmp_path: Path) -> Path:
    source = tmp_path / "proj" / "pkg" / "k" / "csrc" / "k.cu"
    source.parent.mkdir(parents=True)
    source.write_text("")
    (source.parent / "k.h").write_text("")
    (tmp_path / "proj" / "build" / "kernelpack" / "gen" / "k").mkdir(parents=True)
    (tmp_path / "proj" / "build" / "kernelpack" / "gen" / "k" / "_C_init.c").write_text("")
    return tmp_path / "proj"


def _relocator(project: Path, cwd: Path) -> Relocator:
    return Relocator(project / "build" / "kernelpack", cwd)


def test_nvcc_location_becomes_relative_to_the_working_folder(project: Path) -> None:
    line = '../../pkg/k/csrc/k.cu(13): error: identifier "x" is undefined'
    assert _relocator(project, project.parent).line(line) == (
        'proj/pkg/k/csrc/k.cu(13): error: identifier "x" is undefined'
    )


def test_gcc_location_and_include_chain_are_rewritten(project: Path) -> None:
    relocator = _relocator(project, project)
    assert (
        relocator.line("../../pkg/k/csrc/k.cu:13:5: error: x") == "pkg/k/csrc/k.cu:13:5: error: x"
    )
    assert relocator.line("In file included from ../../pkg/k/csrc/k.h:3,") == (
        "In file included from pkg/k/csrc/k.h:3,"
    )


def test_quoted_name_in_nvcc_summary_is_rewritten(project: Path) -> None:
    line = '1 error detected in the compilation of "../../pkg/k/csrc/k.cu".'
    assert _relocator(project, project).line(line) == (
        '1 error detected in the compilation of "pkg/k/csrc/k.cu".'
    )


def test_file_outside_the_working_folder_is_named_absolutely(project: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    line = "../../pkg/k/csrc/k.cu(1): error: x"
    assert _relocator(project, elsewhere).line(line) == f"{project}/pkg/k/csrc/k.cu(1): error: x"


def test_a_source_spelled_below_the_root_link_is_named_from_the_working_folder(
    project: Path,
) -> None:
    # Through sccache, nvcc's sources are spelled below /proc/self/cwd/.root (graph).
    link_root(project / "build" / "kernelpack", project)
    line = "/proc/self/cwd/.root/pkg/k/csrc/k.cu(13): error: x"
    assert _relocator(project, project.parent).line(line) == "proj/pkg/k/csrc/k.cu(13): error: x"


def test_generated_module_init_is_named_from_the_working_folder(project: Path) -> None:
    line = "gen/k/_C_init.c:4:1: warning: y"
    assert _relocator(project, project).line(line) == (
        "build/kernelpack/gen/k/_C_init.c:4:1: warning: y"
    )


def test_paths_that_name_nothing_and_absolute_paths_are_left_alone(project: Path) -> None:
    relocator = _relocator(project, project)
    for line in (
        "../../pkg/missing.cu(1): error",
        "/usr/include/../include/stdio.h:1: note",
        "see https://example.org/../x",
    ):
        assert relocator.line(line) == line
