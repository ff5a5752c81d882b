"""The integration tests' builder kit, one copy of each helper (fixtures: conftest.py).

- `build_env(ccache_dir, **extra)`: this process's environment for a build: no
  `KERNELPACK_*` setting, no selection of a test package (`KPDEMO_*`, `KPRIVAL_*`), no
  `TORCH_CUDA_ARCH_LIST` of the developer's shell; the run's ccache; then `extra`.
- `copy_package(name, destination)`: a test package (`tests/integration/packages/<name>`) or
  an example (`examples/<name>`), its sources only, copied to `destination`.
- `copy_built(root, destination)`: a private copy of a built tree (sources, build folder,
  libraries, mtimes kept; the graph's relative paths keep it valid): it rebuilds as a no-op.
- `install_into(wheel, target)`, `run_in(site, code)`: a wheel installed into a private folder,
  and a fresh interpreter that sees only that folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

from kernelpack.builder.outputs import BuildResult

__all__ = [
    "OUTPUTS",
    "BuiltPackage",
    "build_env",
    "copy_built",
    "copy_package",
    "has_gpu",
    "install_into",
    "run_in",
    "source_of",
]

#: The `built_package` fixture (conftest.py): name -> (built root, its BuildResult).
BuiltPackage = Callable[[str], tuple[Path, BuildResult]]

_TESTS = Path(__file__).resolve().parent
_REPO = _TESTS.parents[1]
#: What a build writes into a package: left out of a copy of its sources.
OUTPUTS = shutil.ignore_patterns("build", "dist", "*.so", "_kernel*", "__pycache__")
#: Variables of the developer's shell that would change what a test builds.
_DROPPED = ("KERNELPACK_", "KPDEMO_", "KPRIVAL_", "TORCH_CUDA_ARCH_LIST")


def source_of(name: str) -> Path:
    """The folder of test package or example `name`."""
    for folder in (_TESTS / "packages" / name, _REPO / "examples" / name):
        if folder.is_dir():
            return folder
    raise LookupError(f"no test package or example named {name!r}")


def build_env(ccache_dir: Path, *, without: tuple[str, ...] = (), **extra: str) -> dict[str, str]:
    """The environment of a build (above); `without` drops more variables (names or prefixes)."""
    dropped = (*_DROPPED, *without)
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env["CCACHE_DIR"] = str(ccache_dir)
    env.update(extra)
    return env


def copy_package(name: str, destination: Path) -> Path:
    """Copy the sources of test package or example `name` to `destination`; returns it."""
    shutil.copytree(source_of(name), destination, ignore=OUTPUTS)
    return destination


def copy_built(root: Path, destination: Path) -> Path:
    """Copy the built tree `root` to `destination`, build folder and mtimes kept; returns it."""
    shutil.copytree(root, destination, symlinks=True)
    return destination


def has_gpu() -> bool:
    """Whether torch sees a CUDA device here (False without torch)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def install_into(wheel: Path, target: Path) -> Path:
    """`pip install --no-deps --target target wheel`; returns `target`."""
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), wheel],
        check=True,
        timeout=300,
    )
    return target


def run_in(site: Path, code: str) -> str:
    """The last line `code` prints in a fresh interpreter that sees only `site`, run from it."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        cwd=site,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip().splitlines()[-1]
