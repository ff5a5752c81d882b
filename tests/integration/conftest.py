"""The integration tests' shared fixtures; the plain helpers are in builds.py.

- `ccache_dir` (session): the ccache every build of the run shares, so a copy of a package
  compiles from the objects an earlier build of the run left.
- `built_package(name)` (session): `(root, BuildResult)` of test package or example `name`
  copied and built in place once a run, shared by every file that asks. Read-only: a test
  that changes files works on `builds.copy_built(root, destination)`.
- `example_wheel(name)` (session): the wheel `kernelpack build --wheel-dir` makes of a copy
  of test package or example `name`, once a run (skips without nvcc or torch);
  `llm_ops_wheel` is `example_wheel("llm_ops")`.
- `fresh_venv` (session): a new venv that sees this interpreter's site-packages.
- `builds_ahead` (session, automatic): the slowest builds start in the background
  (ahead.py), and the test files that consume them run last.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import ahead
import pytest
import toolkits
from buildlog import announced, say
from builds import BuiltPackage, build_env, copy_package
from venvs import overlay_venv

from kernelpack.builder import engine, install
from kernelpack.builder.outputs import BuildResult
from kernelpack.project.locate import locate


@pytest.fixture(scope="session")
def ccache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp() / "kp-ccache"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The consumers of builds ahead run last (ahead.py)."""
    order = ahead.consumers_last([item.path.name for item in items])
    items[:] = [items[i] for i in order]


@pytest.fixture(scope="session", autouse=True)
def builds_ahead(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, ccache_dir: Path
) -> Iterator[None]:
    """Start the background builds the collected tests will consume (ahead.py)."""
    names = ahead.wanted({item.path.name for item in request.session.items})
    if not names or toolkits.nvcc() is None:
        yield
        return
    background = ahead.start(names, ccache_dir, tmp_path_factory.mktemp("ahead"))
    say(
        request.config,
        f"kernelpack tests: building {', '.join(names)} ahead, in the background at the "
        f"lowest priority (log: {background.done / 'log'})",
    )
    try:
        yield
    finally:
        background.stop()


@pytest.fixture(scope="session")
def built_package(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, ccache_dir: Path
) -> BuiltPackage:
    built: dict[str, tuple[Path, BuildResult]] = {}

    def built_package(name: str) -> tuple[Path, BuildResult]:
        if name not in built:
            with announced(request.config, f"{name}, in place", "built_package"):
                root = copy_package(name, tmp_path_factory.mktemp(f"built-{name}") / name)
                result = engine.build_project(locate(root), environ=build_env(ccache_dir))
                install.install_inplace(result)
            built[name] = root, result
        return built[name]

    return built_package


@pytest.fixture(scope="session")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv that sees this interpreter's site-packages (torch, kernelpack, ninja)."""
    return overlay_venv(tmp_path_factory.mktemp("venv") / "v")


@pytest.fixture(scope="session")
def cpu_torch_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The interpreter of a venv holding `ahead.cpu_torch_requirements()` (a CPU-only torch,
    Hugging Face's `kernels`, pytest; nothing of kernelpack), made in the background when it
    could be (ahead.py); skips when they cannot be installed."""
    ready = ahead.ready_venv()
    if ready is not None:
        return ready
    venv = tmp_path_factory.mktemp("cpu_torch") / "v"
    done = ahead.make_cpu_torch_venv(venv)
    if done.returncode != 0:
        wanted = " ".join(ahead.cpu_torch_requirements())
        pytest.skip(f"cannot install {wanted}: {done.stderr.strip()[-300:]}")
    return venv / "bin" / "python"


@pytest.fixture(scope="session")
def example_wheel(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, ccache_dir: Path
) -> Callable[[str], Path]:
    wheels: dict[str, Path] = {}

    def example_wheel(name: str) -> Path:
        if name not in wheels:
            if toolkits.nvcc() is None:
                pytest.skip(toolkits.NO_TOOLKIT)
            pytest.importorskip("torch")
            with announced(request.config, f"the {name} wheel", "example_wheel"):
                ahead.wait(name)  # the background filled the ccache for it (ahead.py)
                wheels[name] = _build_wheel(name, tmp_path_factory, ccache_dir)
        return wheels[name]

    return example_wheel


def _build_wheel(name: str, tmp_path_factory: pytest.TempPathFactory, ccache_dir: Path) -> Path:
    """`kernelpack build --wheel-dir` of a fresh copy of package `name`: its wheel."""
    project = copy_package(name, tmp_path_factory.mktemp("src") / name)
    out = tmp_path_factory.mktemp("wheels")
    result = subprocess.run(
        [sys.executable, "-m", "kernelpack", "build", str(project), "--wheel-dir", str(out)],
        capture_output=True,
        text=True,
        timeout=1800,
        env=build_env(ccache_dir),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = out.glob(f"{name}-*.whl")
    return wheel


@pytest.fixture(scope="session")
def llm_ops_wheel(example_wheel: Callable[[str], Path]) -> Path:
    """examples/llm_ops built with the real nvcc into its stable-ABI wheel, once."""
    return example_wheel("llm_ops")
