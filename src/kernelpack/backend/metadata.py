"""Core metadata (METADATA, PKG-INFO) of a kernel package, from its `[project]` table.

`pyproject-metadata` (the library scikit-build-core and meson-python use) reads and validates
`[project]` and writes the RFC 822 text: license expression and license files (PEP 639),
authors and maintainers, readme (file or table), urls, classifiers, keywords, optional
dependencies, entry points. kernelpack adds what only the build knows:

- the version with its ABI tag (`0.3.0+cu130torch2.14.1`);
- what the wheel needs at run time, and nothing of the builder: `kernelpack-runtime` (a range
  that reads the build record's schema), torch (`torch==2.14.1` when the wheel holds a
  classic-ABI kernel, `torch>=2.10` when every kernel is stable; the public release only, so
  `2.14.1+cu130` and a `2.14.1` from PyPI both satisfy it) and `[project].dependencies`.
  A `kernelpack` dependency is dropped (the builder is not needed at run time); a
  `kernelpack-runtime` or `torch` dependency without a marker is merged into kernelpack's
  requirement (both specifiers apply, so the stricter wins); one with a marker is kept as
  written.

A `[project]` table that is not valid is a `UsageError`: one line naming the key, raised before
anything is compiled or written.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyproject_metadata
from packaging.licenses import InvalidLicenseExpression, canonicalize_license_expression
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version
from pyproject_metadata import ConfigurationError, StandardMetadata

from kernelpack.abitag import AbiTag
from kernelpack.errors import UsageError
from kernelpack.project._toml import display_path, is_inside
from kernelpack.project.locate import Project
from kernelpack_runtime.record import RUNTIME_REQUIREMENT

__all__ = [
    "DEFAULT_LICENSE_FILES",
    "CoreMetadata",
    "check_requires_python",
    "core_metadata",
    "entry_points_text",
    "requirements",
    "torch_requirement",
    "validate_project",
]

#: License files shipped when `[project]` names none (`license-files` absent), as
#: hatchling and setuptools do; PEP 639 leaves the default to the backend.
DEFAULT_LICENSE_FILES = ("LICEN[CS]E*", "COPYING*", "NOTICE*", "AUTHORS*")

# Distributions a user may list that kernelpack's own requirements replace.
_BUILDER = canonicalize_name("kernelpack")
_RUNTIME = canonicalize_name("kernelpack-runtime")
_TORCH = canonicalize_name("torch")


@dataclass(frozen=True)
class CoreMetadata:
    """The validated metadata of one build: what METADATA says and which files go with it."""

    standard: StandardMetadata
    license_files: tuple[tuple[Path, str], ...]
    """(file, path relative to the project root) of every license file, sorted."""

    def text(self) -> str:
        """The METADATA / PKG-INFO text."""
        return str(self.standard.as_rfc822())


def _source(project: Project) -> str:
    if project.pyproject is None:
        return display_path(project.manifest_path)
    return display_path(project.pyproject)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _error(project: Project, exc: BaseException) -> UsageError:
    """One line naming the file and the key, for a `pyproject-metadata` error (or group)."""
    while isinstance(exc, pyproject_metadata.errors.ExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    message = _one_line(str(exc))
    key = getattr(exc, "key", None)
    if project.pyproject is None and key == "project.name":
        # No pyproject.toml: the distribution is named after the package folder.
        return UsageError(
            f"{_source(project)}: the package folder {project.package!r} gives the "
            f"distribution name {project.dist_name!r}, which is not a valid one (ASCII "
            "letters, digits, '.', '_', '-'); add a pyproject.toml with an ASCII "
            "[project].name"
        )
    if key and key not in message:
        message = f"{key}: {message}"
    return UsageError(f"{_source(project)}: {message}")


def _table(project: Project) -> dict[str, Any]:
    table = dict(project.metadata)
    if not table:
        # A manifest without pyproject.toml: the package name, version 0.0.0.
        table = {"name": project.dist_name, "version": project.version}
    if "license-files" not in table and not isinstance(table.get("license"), dict):
        found = [
            pattern
            for pattern in DEFAULT_LICENSE_FILES
            if any(path.is_file() for path in project.root.glob(pattern))
        ]
        if found:
            table["license-files"] = found
    return table


def core_metadata(
    project: Project,
    version: str | None = None,
    requires: Sequence[Requirement] | None = None,
    *,
    dynamic: Sequence[str] = (),
) -> CoreMetadata:
    """Validate `[project]` and return the metadata of a build with `version` (default: the
    project's own) and run-time `requires` (default: `[project].dependencies` as written).

    `dynamic` names core-metadata fields a wheel may change (PEP 643), for an sdist's
    PKG-INFO. Raises `UsageError` (one line naming the key) for a bad `[project]`.
    """
    table = _table(project)
    license = table.get("license")
    if isinstance(license, str):
        try:
            table["license"] = canonicalize_license_expression(license)
        except InvalidLicenseExpression as exc:
            raise UsageError(
                f"{_source(project)}: [project].license = {license!r}: {_one_line(str(exc))}; "
                "expected an "
                'SPDX license expression such as "Apache-2.0" or "MIT OR Apache-2.0"'
            ) from None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pyproject_metadata.errors.ConfigurationWarning)
        try:
            standard = StandardMetadata.from_pyproject(
                {"project": table}, project.root, dynamic_metadata=list(dynamic)
            )
            standard.version = Version(version or project.version)
            if requires is not None:
                standard.dependencies = list(requires)
            standard.validate(warn=False)
        except (ConfigurationError, pyproject_metadata.errors.ExceptionGroup) as exc:
            raise _error(project, exc) from None
    files = []
    for path in sorted(set(standard.license_files or ())):
        file = project.root / path
        if file.is_symlink() and not is_inside(file.resolve(), project.root.resolve()):
            raise UsageError(
                f"{_source(project)}: [project].license-files: {path.as_posix()} is a symlink "
                "to a file outside the project; license files must lie inside it"
            )
        files.append((file, path.as_posix()))
    return CoreMetadata(standard=standard, license_files=tuple(files))


def torch_requirement(tag: AbiTag | None) -> Requirement:
    """torch as a wheel with ABI tag `tag` (the plan's) needs it: `torch==2.14.1` for a
    classic-ABI tag (`cu130torch2.14.1`), `torch>=2.10` for a stable one (`cu130stable2.10`),
    any torch for a wheel whose version names no torch (None)."""
    if tag is None:
        return Requirement("torch")
    if tag.kind == "stable":
        return Requirement(f"torch>={tag.torch}")
    # The public release only: a local label (`+cu130`) in the requirement would refuse the
    # same release from PyPI, whose metadata carries none.
    return Requirement(f"torch=={tag.torch.public}")


def requirements(project: Project, abi: AbiTag | None) -> list[Requirement]:
    """Requires-Dist of a wheel with ABI tag `abi`: kernelpack-runtime, torch, then
    `[project].dependencies` (see the module docstring for how duplicates are merged).

    A torch dependency that excludes the torch a classic-ABI wheel is built for is a
    `UsageError`: no environment could install that wheel.
    """
    ours = {_RUNTIME: Requirement(RUNTIME_REQUIREMENT), _TORCH: torch_requirement(abi)}
    rest: list[Requirement] = []
    for text in project.metadata.get("dependencies", []) or []:
        try:
            requirement = Requirement(str(text))
        except ValueError:
            continue  # core_metadata() reports it with its key
        name = canonicalize_name(requirement.name)
        if name == _BUILDER:
            continue
        if name in ours and requirement.marker is None and requirement.url is None:
            merged = ours[name]
            pinned = [s for s in merged.specifier if s.operator == "=="]
            for spec in pinned:
                if not requirement.specifier.contains(spec.version, prereleases=True):
                    raise UsageError(
                        f"{_source(project)}: [project].dependencies: {requirement} excludes "
                        f"torch {spec.version}, which this wheel's classic-ABI kernels are "
                        "built against"
                    )
            merged.specifier &= requirement.specifier
            merged.extras |= requirement.extras
            continue
        rest.append(requirement)
    return [*ours.values(), *rest]


def check_requires_python(project: Project, python: tuple[int, int, int] | None = None) -> None:
    """`UsageError` when `[project].requires-python` excludes the interpreter that builds
    (`python`, default this one): the wheel would be tagged for a Python pip refuses."""
    spec = project.metadata.get("requires-python")
    if not isinstance(spec, str):
        return
    running = ".".join(str(part) for part in (python or sys.version_info[:3]))
    try:
        specifiers = SpecifierSet(spec)
    except ValueError:
        raise UsageError(
            f"{_source(project)}: [project].requires-python: {spec!r} is not a version "
            'specifier; expected e.g. ">=3.10"'
        ) from None
    if not specifiers.contains(running, prereleases=True):
        raise UsageError(
            f"{_source(project)}: [project].requires-python = {spec!r} excludes Python "
            f"{running}, which runs this build; build with a Python it allows"
        )


def entry_points_text(metadata: CoreMetadata) -> str | None:
    """`entry_points.txt` from `[project.scripts]`, `[project.gui-scripts]` and
    `[project.entry-points]`; None when there are none."""
    standard = metadata.standard
    groups: dict[str, dict[str, str]] = {}
    if standard.scripts:
        groups["console_scripts"] = dict(standard.scripts)
    if standard.gui_scripts:
        groups["gui_scripts"] = dict(standard.gui_scripts)
    groups.update({group: dict(entries) for group, entries in standard.entrypoints.items()})
    if not groups:
        return None
    sections = []
    for group, entries in groups.items():
        lines = "".join(f"{name} = {target}\n" for name, target in entries.items())
        sections.append(f"[{group}]\n{lines}")
    return "\n".join(sections)


def validate_project(project: Project, python: tuple[int, int, int] | None = None) -> None:
    """Everything about `[project]` that can stop a build, checked before it compiles:
    `requires-python` against this Python (`check_requires_python`) and the whole table
    (`core_metadata`). Raises `UsageError` (one line)."""
    check_requires_python(project, python)
    core_metadata(project)
