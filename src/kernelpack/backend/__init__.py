"""PEP 517 / PEP 660 build backend: `build-backend = "kernelpack.backend"`.

The hooks run in the project folder (the current directory). Building needs the torch the
kernels compile against. Without build isolation (`pip wheel --no-build-isolation .`,
`pip install --no-build-isolation -e .`, `uv pip install --no-build-isolation -e .`) that is
the environment's own torch, the usual choice: a classic-ABI wheel then pins exactly it. In an
isolated build environment (pip's default, e.g. installing an sdist) there is no torch, so
`get_requires_for_build_wheel` asks the front end for one: the project's own torch
dependency (`[project].dependencies`, e.g. `torch>=2.10`), else any torch.

The CUDA toolkit follows the toolkit rule (`kernelpack.toolchain.detection`). When the build
environment has no usable nvcc (no system toolkit of torch's CUDA major, no CUDA wheels, none
in kernelpack's cache), `get_requires_for_build_*` add the CUDA wheels of torch's CUDA release
(`KERNELPACK_CUDA` chooses another), so `pip install <sdist>`, `pip wheel .` and `uv build`
work on a machine with no CUDA installed. When that release cannot be known yet (an isolated
build whose torch is not installed, `KERNELPACK_CUDA` unset), the build installs them into
kernelpack's cache once torch is there, as `kernelpack build` does.

`config_settings` (`pip … -C kernels=a,b -C require=1 -C jobs=4`) select kernels like the
CLI flags; the environment variables (`<PREFIX>_KERNELS`, …) work as always.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from kernelpack.backend import editable
from kernelpack.backend.metadata import validate_project
from kernelpack.backend.sdist import write_sdist
from kernelpack.backend.tags import provisional_platform, wheel_tag
from kernelpack.backend.wheel import write_dist_info, write_wheel
from kernelpack.builder import engine, install
from kernelpack.errors import KernelpackError, PlanError, UsageError
from kernelpack.plan import parse_kernels, plan_project
from kernelpack.project.locate import Project, locate
from kernelpack.syntax import pth
from kernelpack.toolchain import cudawheels
from kernelpack.toolchain.detection import detect
from kernelpack.toolchain.environment import BuildEnvironment
from kernelpack_runtime._switch import parse_switch

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]

ConfigSettings = dict[str, Any] | None

#: What building a wheel needs besides the build-system requirements (nvcc is the
#: machine's own; torch is added when the build environment has none).
_WHEEL_REQUIRES = ["kernelpack", "ninja>=1.11"]


def _project() -> Project:
    return locate(Path.cwd())


def _build_project() -> Project:
    """The project, refused (one line) before anything compiles when its `[project]` is
    not valid or its `requires-python` excludes this Python."""
    project = _project()
    validate_project(project)
    return project


@contextmanager
def _explain_isolation() -> Iterator[None]:
    """Say how to fix the usual failure: an isolated build environment has no torch."""
    try:
        yield
    except PlanError as exc:
        if "torch" not in str(exc):
            raise
        raise PlanError(
            f"{exc}; build without isolation (pip/uv --no-build-isolation) so the build "
            "sees the torch the kernels compile against"
        ) from None


def _selection(config: ConfigSettings) -> dict[str, Any]:
    config = config or {}
    options: dict[str, Any] = {}
    kernels = config.get("kernels")
    if isinstance(kernels, str):
        options["kernels"] = parse_kernels(kernels, "config setting kernels")
    require = config.get("require")
    if isinstance(require, str):
        options["require"] = parse_switch(require, "config setting require")
    jobs = config.get("jobs")
    if isinstance(jobs, str):
        if not jobs.isdigit() or int(jobs) < 1:
            raise UsageError(f"config setting jobs={jobs}: expected a positive integer")
        options["jobs"] = int(jobs)
    return options


def _wheel_requires() -> list[str]:
    requires = list(_WHEEL_REQUIRES)
    if importlib.util.find_spec("torch") is None:
        requires.append(_build_torch())
    return requires + _cuda_wheels()


def _cuda_wheels() -> list[str]:
    """The CUDA wheels when the build environment has no usable nvcc and the CUDA release
    is known (`KERNELPACK_CUDA`, else the build environment's torch); else none."""
    try:
        environment = BuildEnvironment.from_environ(os.environ)
        toolchain = detect(environment=environment)
    except KernelpackError:
        return []  # the build hooks report it in one line
    if toolchain.nvcc_missing is None and toolchain.toolkit is not None:
        return []
    cuda = environment.cuda or toolchain.torch_cuda
    if cuda is None or cudawheels.unsupported(cuda) is not None:
        return []
    return list(cudawheels.requirements(cuda))


def _build_torch() -> str:
    """The torch an isolated build compiles against: the project's unmarked torch
    dependency, else any torch."""
    try:
        dependencies = _project().metadata.get("dependencies", [])
    except KernelpackError:
        return "torch"  # the build hooks report it in one line
    for text in dependencies if isinstance(dependencies, list) else []:
        try:
            requirement = Requirement(str(text))
        except InvalidRequirement:
            continue
        if canonicalize_name(requirement.name) == "torch" and requirement.marker is None:
            return f"torch{requirement.specifier}"
    return "torch"


def get_requires_for_build_wheel(config_settings: ConfigSettings = None) -> list[str]:
    """kernelpack and ninja, torch when this environment has none (an isolated build), and
    the CUDA wheels when it has no usable nvcc (above)."""
    return _wheel_requires()


def get_requires_for_build_editable(config_settings: ConfigSettings = None) -> list[str]:
    """As for a wheel."""
    return _wheel_requires()


def get_requires_for_build_sdist(config_settings: ConfigSettings = None) -> list[str]:
    """Nothing: an sdist compiles nothing."""
    return []


def _prepare_metadata(metadata_directory: str, config_settings: ConfigSettings) -> str:
    project = _build_project()
    options = _selection(config_settings)
    options.pop("jobs", None)
    with _explain_isolation():
        plan = plan_project(project, **options)
    # The platform part is provisional: it is decided from the libraries once they are built
    # (front ends read METADATA, never this WHEEL file).
    tag = wheel_tag(plan, provisional_platform())
    return write_dist_info(project, plan, Path(metadata_directory), tag)


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: ConfigSettings = None
) -> str:
    """Write `<dist>-<version>.dist-info` (the version carries the ABI tag); no compile."""
    return _prepare_metadata(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(
    metadata_directory: str, config_settings: ConfigSettings = None
) -> str:
    """As for a wheel."""
    return _prepare_metadata(metadata_directory, config_settings)


def build_wheel(
    wheel_directory: str,
    config_settings: ConfigSettings = None,
    metadata_directory: str | None = None,
) -> str:
    """Compile every planned kernel and write the wheel; return its file name."""
    from kernelpack.cli._render import settings_line

    project = _build_project()
    with _explain_isolation():
        result = engine.build_project(
            project, stream=sys.stderr, announce=settings_line, **_selection(config_settings)
        )
    return write_wheel(project, result, Path(wheel_directory)).name


def build_editable(
    wheel_directory: str,
    config_settings: ConfigSettings = None,
    metadata_directory: str | None = None,
) -> str:
    """PEP 660: compile in place (libraries and record into the source tree) and return a
    wheel whose `.pth` puts the source tree on `sys.path` and whose import hook rebuilds
    what changed when the package is imported (`kernelpack.backend.editable`)."""
    from kernelpack.cli._render import settings_line

    project = _build_project()
    # Refused before anything compiles: the folder becomes a line of the wheel's `.pth`.
    pth.path_line(str(project.package_dir.parent.absolute()), what="the project's folder")
    options = _selection(config_settings)
    before = editable.inputs(project)
    with _explain_isolation():
        result = engine.build_project(project, stream=sys.stderr, announce=settings_line, **options)
    install.install_inplace(result)
    editable.write_stamp(project, result, before)
    settings = editable.settings_for(result.plan.environment, options)
    path = write_wheel(
        project,
        result,
        Path(wheel_directory),
        editable_path=project.package_dir.parent,
        editable_files=editable.hook_files(project, settings),
    )
    return path.name


def build_sdist(sdist_directory: str, config_settings: ConfigSettings = None) -> str:
    """Write `<name>-<version>.tar.gz` with the sources and PKG-INFO; return its file name."""
    return write_sdist(_project(), Path(sdist_directory)).name
