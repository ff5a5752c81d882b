"""Wheels: the package's Python files, each kernel's `_C`, and the build record.

The version is the project's plus the plan's ABI tag (`0.3.0+cu130torch2.14.1`), identical
in the file name and in METADATA. The tag fits the ABI: `cp311-cp311-linux_x86_64` when any
kernel uses the classic ABI, `cp310-abi3-linux_x86_64` when all are stable (the abi3 floor
is the project's `requires-python` minimum). Sources (`csrc/`, `.cu`, headers) never ship.
`wheel.wheelfile.WheelFile` writes the RECORD.
"""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from packaging.metadata import Metadata, RawMetadata
from packaging.tags import Tag, interpreter_name, interpreter_version
from packaging.utils import canonicalize_name
from packaging.version import Version
from wheel.wheelfile import WheelFile

from kernelpack import __version__
from kernelpack.builder.engine import BuildResult
from kernelpack.filekinds import BUILD_OUTPUT_SUFFIXES, CACHE_DIRS, NATIVE_DIRS, is_native
from kernelpack.plan import BuildPlan
from kernelpack.project import Project
from kernelpack_runtime.record import FILENAME as RECORD_FILENAME

__all__ = [
    "dist_info_name",
    "metadata_text",
    "package_files",
    "wheel_name",
    "wheel_tag",
    "write_dist_info",
    "write_wheel",
]

# Build outputs live in <project root>/build, outside the package: a subpackage (or kernel)
# named `build` is Python code and ships. The kernels' libraries are added from the build.
_SKIP_DIRS = NATIVE_DIRS | CACHE_DIRS


def wheel_tag(plan: BuildPlan) -> Tag:
    """`cp311-cp311-<platform>`, or `cp3X-abi3-<platform>` (X: the plan's Python floor) when
    every kernel is stable (`BuildPlan.all_stable`)."""
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    if plan.all_stable:
        floor = plan.python_floor
        return Tag(f"cp{floor[0]}{floor[1]}", "abi3", platform)
    python = f"{interpreter_name()}{interpreter_version()}"
    return Tag(python, python, platform)


def _dist(project: Project) -> str:
    return canonicalize_name(project.dist_name).replace("-", "_")


def dist_info_name(project: Project, version: str) -> str:
    """`kpdemo-0.3.0+cu130stable2.10.dist-info`."""
    return f"{_dist(project)}-{Version(version)}.dist-info"


def wheel_name(project: Project, version: str, tag: Tag) -> str:
    """`kpdemo-0.3.0+cu130stable2.10-cp310-abi3-linux_x86_64.whl`."""
    return f"{_dist(project)}-{Version(version)}-{tag}.whl"


def metadata_text(project: Project, version: str) -> str:
    """Core metadata (METADATA / PKG-INFO) from `[project]`, with `version`."""
    table = project.metadata
    raw: RawMetadata = {
        "metadata_version": "2.1",
        "name": str(table.get("name", project.dist_name)),
        "version": str(Version(version)),
    }
    if isinstance(table.get("description"), str):
        raw["summary"] = table["description"]
    if isinstance(table.get("requires-python"), str):
        raw["requires_python"] = table["requires-python"]
    requires = [str(r) for r in table.get("dependencies", [])]
    extras = table.get("optional-dependencies", {})
    for extra, reqs in extras.items():
        for req in reqs:
            marker = f'extra == "{extra}"'
            requires.append(f"{req}; {marker}" if ";" not in req else f"{req} and {marker}")
    if requires:
        raw["requires_dist"] = requires
    if extras:
        raw["provides_extra"] = list(extras)
    if isinstance(table.get("keywords"), list):
        raw["keywords"] = [str(k) for k in table["keywords"]]
    if isinstance(table.get("classifiers"), list):
        raw["classifiers"] = [str(c) for c in table["classifiers"]]
    urls = table.get("urls")
    if isinstance(urls, dict):
        raw["project_urls"] = {str(k): str(v) for k, v in urls.items()}
    readme = table.get("readme")
    if isinstance(readme, str) and (project.root / readme).is_file():
        raw["description"] = (project.root / readme).read_text(encoding="utf-8")
        raw["description_content_type"] = (
            "text/markdown" if readme.endswith(".md") else "text/plain"
        )
    Metadata.from_raw(raw)  # validates every field (raises InvalidMetadata)
    return _render(raw)


# Core-metadata field names, in the order they are written.
_FIELDS = (
    ("metadata_version", "Metadata-Version"),
    ("name", "Name"),
    ("version", "Version"),
    ("summary", "Summary"),
    ("keywords", "Keywords"),
    ("classifiers", "Classifier"),
    ("project_urls", "Project-URL"),
    ("requires_python", "Requires-Python"),
    ("requires_dist", "Requires-Dist"),
    ("provides_extra", "Provides-Extra"),
    ("description_content_type", "Description-Content-Type"),
)


def _render(raw: RawMetadata) -> str:
    data: dict[str, Any] = dict(raw)
    lines = []
    for key, field_name in _FIELDS:
        value = data.get(key)
        if value is None:
            continue
        if key == "keywords":
            lines.append(f"{field_name}: {','.join(value)}")
        elif key == "project_urls":
            lines += [f"{field_name}: {label}, {url}" for label, url in value.items()]
        elif isinstance(value, list):
            lines += [f"{field_name}: {item}" for item in value]
        else:
            lines.append(f"{field_name}: {value}")
    text = "\n".join(lines) + "\n"
    description = data.get("description")
    if description:
        text += "\n" + str(description)
    return text


def _wheel_text(tag: Tag) -> str:
    return (
        "Wheel-Version: 1.0\n"
        f"Generator: kernelpack {__version__}\n"
        "Root-Is-Purelib: false\n"
        f"Tag: {tag}\n"
    )


def _entry_points(project: Project) -> str | None:
    table = project.metadata
    sections = []
    for group, key in (("console_scripts", "scripts"), ("gui_scripts", "gui-scripts")):
        scripts = table.get(key)
        if isinstance(scripts, dict) and scripts:
            lines = "".join(f"{name} = {target}\n" for name, target in scripts.items())
            sections.append(f"[{group}]\n{lines}")
    for group, entries in dict(table.get("entry-points", {})).items():
        lines = "".join(f"{name} = {target}\n" for name, target in entries.items())
        sections.append(f"[{group}]\n{lines}")
    return "\n".join(sections) if sections else None


def write_dist_info(project: Project, version: str, directory: Path, tag: Tag) -> str:
    """Write `<dist>.dist-info/` (METADATA, WHEEL, entry points) under `directory`."""
    name = dist_info_name(project, version)
    folder = directory / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "METADATA").write_text(metadata_text(project, version), encoding="utf-8")
    (folder / "WHEEL").write_text(_wheel_text(tag), encoding="utf-8")
    entry_points = _entry_points(project)
    if entry_points:
        (folder / "entry_points.txt").write_text(entry_points, encoding="utf-8")
    return name


def package_files(project: Project) -> Iterator[tuple[Path, str]]:
    """(file, archive name) for the package's Python surface: no sources, no libraries,
    no build record (the wheel gets the freshly built ones)."""
    package_dir = project.package_dir
    base = package_dir.parent
    for path in sorted(package_dir.rglob("*")):
        rel = path.relative_to(package_dir)
        if any(part in _SKIP_DIRS for part in rel.parts) or not path.is_file():
            continue
        if is_native(path) or path.suffix in BUILD_OUTPUT_SUFFIXES:
            continue
        if rel.as_posix() == RECORD_FILENAME:
            continue
        yield path, path.relative_to(base).as_posix()


def write_wheel(
    project: Project,
    result: BuildResult,
    wheel_dir: Path,
    *,
    editable_path: Path | None = None,
) -> Path:
    """Write the wheel of a finished build into `wheel_dir` and return its path.

    With `editable_path` (PEP 660), the wheel holds only the metadata and a `.pth` naming
    that folder (the libraries were installed in place).
    """
    version = result.record.version
    tag = wheel_tag(result.plan)
    wheel_dir.mkdir(parents=True, exist_ok=True)
    path = wheel_dir / wheel_name(project, version, tag)
    # WheelFile needs a valid wheel name: write it in a hidden folder, then rename.
    staging = wheel_dir / f".{path.stem}.partial"
    staging.mkdir(exist_ok=True)
    tmp = staging / path.name
    package = project.package
    try:
        with WheelFile(tmp, "w") as whl:
            if editable_path is not None:
                whl.writestr(f"_{_dist(project)}_editable.pth", f"{editable_path}\n")
            else:
                for file, arcname in package_files(project):
                    whl.write(str(file), arcname)
                for kernel, staged in result.libraries.items():
                    whl.write(str(staged), f"{package}/{kernel}/{staged.name}")
                whl.writestr(f"{package}/{RECORD_FILENAME}", result.record.dumps())
            info = dist_info_name(project, version)
            whl.writestr(f"{info}/METADATA", metadata_text(project, version))
            whl.writestr(f"{info}/WHEEL", _wheel_text(tag))
            entry_points = _entry_points(project)
            if entry_points:
                whl.writestr(f"{info}/entry_points.txt", entry_points)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
        staging.rmdir()
    return path
