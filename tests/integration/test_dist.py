"""kernelpack's own two distributions, as `scripts/dist OUTDIR` builds them for a release.

`scripts/dist` runs `python -m build` (isolated: hatchling comes from the configured index) on
src/ and on the repository. The files must pass `twine check --strict` and install with
`--find-links` alone; a kernel package then builds with pip's default isolated build against
them. That last build installs torch into pip's build environment (a 5 GB download where no
local copy is configured), so it runs only with KERNELPACK_TEST_ISOLATED_BUILD=1.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.metadata import Metadata
from venvs import new_venv, pip

pytestmark = pytest.mark.integration

REPO = Path(__file__).parents[2]
KPDEMO = Path(__file__).parent / "packages" / "kpdemo"
FILES = [
    "kernelpack-0.1.0-py3-none-any.whl",
    "kernelpack-0.1.0.tar.gz",
    "kernelpack_runtime-0.1.0-py3-none-any.whl",
    "kernelpack_runtime-0.1.0.tar.gz",
]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        [REPO / "scripts" / "dist", out],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": sys.executable},
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def _metadata(wheel: Path) -> Metadata:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return Metadata.from_email(archive.read(name), validate=True)


def test_one_command_builds_both_wheels_and_sdists(dist: Path) -> None:
    assert sorted(p.name for p in dist.iterdir()) == FILES
    result = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *sorted(dist.iterdir())],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_builder_wheel_requires_the_runtime_of_its_own_version(dist: Path) -> None:
    wheel = dist / "kernelpack-0.1.0-py3-none-any.whl"
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.startswith("kernelpack_runtime/")]
    assert "kernelpack-runtime==0.1.0" in [str(r) for r in _metadata(wheel).requires_dist or []]


def test_the_runtime_installs_from_the_folder_with_packaging_only(
    dist: Path, tmp_path: Path
) -> None:
    python, _ = new_venv(tmp_path / "v")
    wheels = tmp_path / "wheels"
    shutil.copytree(dist, wheels)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", wheels, "packaging"],
        check=True,
        capture_output=True,
    )
    pip(python, "install", "-q", "--no-index", "--find-links", wheels, "kernelpack-runtime")
    result = subprocess.run(
        [python, "-m", "kernelpack_runtime", "status", "no_such_package"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "no_such_package: no such package" in result.stderr


@pytest.mark.skipif(
    os.environ.get("KERNELPACK_TEST_ISOLATED_BUILD") != "1",
    reason="installs torch into pip's build environment; set KERNELPACK_TEST_ISOLATED_BUILD=1",
)
def test_a_kernel_package_builds_with_pips_isolated_build_from_the_folder(
    dist: Path, tmp_path: Path
) -> None:
    project = tmp_path / "kpdemo"
    shutil.copytree(KPDEMO, project, ignore=shutil.ignore_patterns("build", "*.so", "_kernel*"))
    out = tmp_path / "wheels"
    # pip's default: an isolated build environment holding kernelpack from the folder (and,
    # from the configured index, kernelpack's own dependencies and torch).
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KPDEMO_", "KERNELPACK_"))}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--find-links",
            dist,
            "-w",
            out,
            project,
        ],
        capture_output=True,
        text=True,
        env={**env, "KPDEMO_KERNELS": "scale", "MAX_JOBS": "1"},
        timeout=1800,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (wheel,) = out.glob("kpdemo-*.whl")
    assert "+cu130stable2.10" in wheel.name
