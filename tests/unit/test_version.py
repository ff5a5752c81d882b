"""The release version is written once (`kernelpack_runtime/_version.py`); everything else
reads it, derives from it, or is tied to it here."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import kernelpack
import kernelpack_runtime
from kernelpack_runtime._version import __version__
from kernelpack_runtime.record import RUNTIME_REQUIREMENT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def _pyproject(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    return data


@pytest.mark.parametrize(
    ("pyproject", "path"),
    [
        (ROOT / "pyproject.toml", "src/kernelpack_runtime/_version.py"),
        (ROOT / "src" / "pyproject.toml", "kernelpack_runtime/_version.py"),
    ],
)
def test_both_distributions_read_their_version_from_the_one_file(
    pyproject: Path, path: str
) -> None:
    data = _pyproject(pyproject)
    assert "version" not in data["project"] and data["project"]["dynamic"] == ["version"]
    assert data["tool"]["hatch"]["version"] == {"path": path}
    assert (pyproject.parent / path).is_file()


def test_the_packages_say_the_one_version() -> None:
    assert kernelpack.__version__ == kernelpack_runtime.__version__ == __version__
    Version(__version__)


def test_kernelpack_pins_exactly_the_runtime_of_its_own_version() -> None:
    dependencies = _pyproject(ROOT / "pyproject.toml")["project"]["dependencies"]
    pins = [Requirement(text) for text in dependencies]
    runtime = [r for r in pins if r.name == "kernelpack-runtime"]
    assert [str(r.specifier) for r in runtime] == [f"=={__version__}"]


def test_kernel_wheels_require_a_runtime_range_that_holds_this_release() -> None:
    requirement = Requirement(RUNTIME_REQUIREMENT)
    assert requirement.name == "kernelpack-runtime"
    assert requirement.specifier.contains(__version__)
    release = Version(__version__).release
    assert not requirement.specifier.contains(f"{release[0]}.{release[1] + 1}.0")
