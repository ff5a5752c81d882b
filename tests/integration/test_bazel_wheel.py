"""kernelpack's own wheel carries the files its users need besides the modules: `defs.bzl` and
the runner for Bazel, `py.typed` for type checkers of kernel packages."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SHIPPED = ("kernelpack/bazel/defs.bzl", "kernelpack/bazel/pytest_runner.py", "kernelpack/py.typed")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """kernelpack's wheel, built by pip from a copy of the project (isolated, as a user would)."""
    tree = tmp_path_factory.mktemp("kernelpack-src")
    shutil.copy(REPO / "pyproject.toml", tree)
    shutil.copy(REPO / "README.md", tree)
    shutil.copytree(REPO / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__"))
    out = tree / "dist"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(tree)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot build kernelpack's wheel here: {done.stderr.strip()[-300:]}")
    (built,) = out.glob("kernelpack-*.whl")
    return zipfile.ZipFile(built)


@pytest.mark.parametrize("name", SHIPPED)
def test_kernelpack_wheel_ships_the_file_unchanged(wheel: zipfile.ZipFile, name: str) -> None:
    assert wheel.read(name) == (REPO / "src" / name).read_bytes()
