"""Finding the manifest from a repository root (the seed's layout) and from a kernel-builder
project, and the one-line errors when the repository does not say which package it is."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kernelpack.cli import main
from kernelpack.errors import UsageError
from kernelpack.project.locate import locate

# Every test runs in its tmp_path.
pytestmark = pytest.mark.usefixtures("in_tmp")

FOREIGN = Path(__file__).resolve().parents[1] / "foreign"
PRIME = FOREIGN / "prime-kernels"
KERNELS = '[rms]\nsources = ["csrc/rms.cu"]\narch = "9.0a"\n'


def make_repo(root: Path, name: str = "my-kernels", *, src: bool = False) -> Path:
    """A repository root: pyproject.toml with [project] only, the package under it."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(f'[project]\nname = "{name}"\nversion = "0.2.0"\n')
    package = root / ("src" if src else "") / name.replace("-", "_")
    (package / "rms" / "csrc").mkdir(parents=True)
    (package / "rms" / "csrc" / "rms.cu").write_text("// x\n")
    (package / "kernels.toml").write_text(KERNELS)
    return package


def _one_line(path: Path) -> str:
    with pytest.raises(UsageError) as excinfo:
        locate(path)
    assert excinfo.value.exit_code == 2
    message = str(excinfo.value)
    assert "\n" not in message
    return message


def test_repository_root_finds_the_package_from_project_name(tmp_path: Path) -> None:
    package = make_repo(tmp_path / "repo")
    project = locate(tmp_path / "repo")
    assert project.manifest_path == package / "kernels.toml"
    assert (project.root, project.version) == (tmp_path / "repo", "0.2.0")
    assert project.found is not None
    assert project.found.startswith('my_kernels/kernels.toml (from [project].name "my-kernels"')


def test_repository_root_finds_a_src_layout_package(tmp_path: Path) -> None:
    package = make_repo(tmp_path / "repo", src=True)
    project = locate(tmp_path / "repo" / "pyproject.toml")
    assert project.manifest_path == package / "kernels.toml"
    assert project.found is not None and project.found.startswith("src/my_kernels/kernels.toml")


def test_both_layouts_at_once_is_ambiguous(tmp_path: Path) -> None:
    make_repo(tmp_path / "repo")
    make_repo(tmp_path / "repo", src=True)
    message = _one_line(tmp_path / "repo")
    assert "found both my_kernels/kernels.toml and src/my_kernels/kernels.toml" in message


def test_no_package_of_that_name_names_what_was_looked_for(tmp_path: Path) -> None:
    make_repo(tmp_path / "repo")
    (tmp_path / "repo" / "pyproject.toml").write_text('[project]\nname = "other"\n')
    message = _one_line(tmp_path / "repo")
    assert "found neither other/kernels.toml nor src/other/kernels.toml" in message


def test_no_project_name_says_so(tmp_path: Path) -> None:
    make_repo(tmp_path / "repo")
    (tmp_path / "repo" / "pyproject.toml").write_text("[build-system]\nrequires = []\n")
    assert "no [project].name" in _one_line(tmp_path / "repo")


def test_a_kernel_builder_project_is_found_from_its_folder() -> None:
    project = locate(FOREIGN / "hf-kernels" / "examples" / "relu")
    assert project.is_build_toml and project.package == "relu"
    assert project.found is not None and project.found.endswith("build.toml (kernel-builder)")


def test_prime_kernels_root_is_checked_and_says_which_manifest(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["check", str(PRIME)]) == 0
    captured = capsys.readouterr()
    assert 'prime_kernels/kernels.toml (from [project].name "prime-kernels"' in captured.err
    assert "flash_moe" in captured.out


@pytest.mark.skipif(sys.version_info[:2] == (3, 12), reason="prime-kernels builds on 3.12")
def test_prime_kernels_build_on_another_python_is_the_requires_python_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["build", str(PRIME), "--wheel-dir", str(tmp_path / "dist")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    running = ".".join(map(str, sys.version_info[:3]))
    assert err[0].startswith("kernelpack build: using prime_kernels/kernels.toml")
    assert len(err) == 2 and err[1].startswith("kernelpack build: error: ")
    assert f"requires-python = '~=3.12.0' excludes Python {running}" in err[1]
    assert not (PRIME / "build").exists() and not (tmp_path / "dist").exists()
