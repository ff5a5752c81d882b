"""`Project`: where a kernel package lives, found from the PATH a user gives.

PATH is a `kernels.toml`, a package folder holding one, a project folder whose
`pyproject.toml` has `[tool.kernelpack]`, a repository root whose `pyproject.toml` names the
package (`[project].name` -> `<name>/kernels.toml` or `src/<name>/kernels.toml`), or a
Hugging Face kernel-builder project (its `build.toml` or the folder holding it); default: the
current folder. The project root is the folder of `pyproject.toml` (or of `build.toml`): next
to the package folder (flat layout) or above `src/` (src layout). A manifest with no such
`pyproject.toml` is a project of its own, rooted at the package folder's parent.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.licenses import InvalidLicenseExpression, canonicalize_license_expression
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name

from kernelpack.errors import ManifestError, UsageError
from kernelpack.project import buildtoml
from kernelpack.project._toml import display_path, read_toml
from kernelpack.project.manifest import Manifest, load
from kernelpack.project.settings import Settings

__all__ = ["MANIFEST_NAME", "PACKAGE_HELP", "PATH_HELP", "Project", "locate", "locate_package"]

#: The manifest's file name.
MANIFEST_NAME = "kernels.toml"

#: What a PATH argument (`kernelpack check|doctor|build [PATH]`) may name, for `--help`.
PATH_HELP = (
    f"a {MANIFEST_NAME}, a package folder holding one, a project folder (pyproject.toml "
    "with [tool.kernelpack] or naming the package), or a kernel-builder build.toml or its "
    "folder (default: the current folder)"
)

#: What a PKG argument (`kernelpack status|contract PKG`) may name, for `--help`.
PACKAGE_HELP = (
    "an importable package name, a package folder, a kernels.toml, or a project folder "
    "whose pyproject.toml names the package"
)

_EXPECTED = (
    f"expected a {MANIFEST_NAME}, a package folder holding one, a project folder whose "
    "pyproject.toml has [tool.kernelpack] or names the package, or a kernel-builder build.toml"
)


@dataclass(frozen=True)
class Project:
    """A kernel package and the project (distribution) it belongs to."""

    root: Path
    """Folder of `pyproject.toml`; without one, the package folder's parent."""
    pyproject: Path | None
    dist_name: str
    """Canonical distribution name (`[project].name`), else the package name."""
    version: str
    """`[project].version`, else "0.0.0" (e.g. a dynamic version)."""
    manifest_path: Path
    package: str
    """Import name: the folder holding `kernels.toml`."""
    package_dir: Path
    settings: Settings = field(default_factory=Settings)
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """The `[project]` table of `pyproject.toml` as parsed (empty without one): what the
    wheel's METADATA and the abi3 floor (`requires-python`) are written from."""
    found: str | None = None
    """How the manifest was found when PATH did not name it (said once by the CLI), e.g.
    `prime_kernels/kernels.toml (from [project].name "prime-kernels")`."""

    @property
    def env_prefix(self) -> str:
        """Prefix of `<PREFIX>_KERNELS` / `<PREFIX>_KERNELS_REQUIRE`, e.g. `LLM_OPS`."""
        return self.settings.env_prefix or self.package.upper()

    @property
    def python_floor(self) -> tuple[int, int]:
        """The lowest CPython the project supports (`requires-python`), at least 3.10.

        Stable kernels are compiled for its limited API and tagged `cp3X-abi3`.
        """
        floor = (3, 10)
        spec = self.metadata.get("requires-python")
        if not isinstance(spec, str):
            return floor
        try:
            specifiers = SpecifierSet(spec)
        except InvalidSpecifier:
            return floor
        for minor in range(10, 40):
            if f"3.{minor}.99" in specifiers or f"3.{minor}" in specifiers:
                return max(floor, (3, minor))
        return floor

    @property
    def is_build_toml(self) -> bool:
        """Whether the manifest is a kernel-builder `build.toml`."""
        return self.manifest_path.name == buildtoml.BUILD_TOML

    def load_manifest(self, *, allow_missing_sources: bool = False) -> Manifest:
        """Parse this project's `kernels.toml` (or `build.toml`) with its settings."""
        reader = buildtoml.load if self.is_build_toml else load
        return reader(
            self.manifest_path,
            settings=self.settings,
            allow_missing_sources=allow_missing_sources,
        )


def locate(path: Path | None = None) -> Project:
    """Find the project PATH names; raise `UsageError` (one line) when it names none."""
    target = (Path.cwd() if path is None else Path(path)).absolute()
    shown = display_path(target)
    if target.is_file():
        if target.name == "pyproject.toml":
            return _from_pyproject(target)
        if target.name == buildtoml.BUILD_TOML:
            return _from_build_toml(target)
        if target.suffix != ".toml":
            raise UsageError(f"{shown}: not a TOML file; {_EXPECTED}")
        return _from_manifest(target)
    if target.is_dir():
        if (target / MANIFEST_NAME).is_file():
            return _from_manifest(target / MANIFEST_NAME)
        pyproject = target / "pyproject.toml"
        build_toml = target / buildtoml.BUILD_TOML
        if build_toml.is_file() and not (pyproject.is_file() and _names_a_manifest(pyproject)):
            project = _from_build_toml(build_toml)
            return replace(project, found=f"{display_path(build_toml)} (kernel-builder)")
        if pyproject.is_file():
            return _from_pyproject(pyproject)
        raise UsageError(
            f"{shown}: no {MANIFEST_NAME}, pyproject.toml or {buildtoml.BUILD_TOML} here; "
            f"{_EXPECTED}"
        )
    raise UsageError(f"{shown}: does not exist; {_EXPECTED}")


def _names_a_manifest(pyproject: Path) -> bool:
    """Whether `[tool.kernelpack].manifest` is set (it then wins over a `build.toml`)."""
    tool = read_toml(pyproject).get("tool")
    table = tool.get("kernelpack") if isinstance(tool, dict) else None
    return isinstance(table, dict) and "manifest" in table


def _license_expression(text: str) -> str:
    """A `build.toml` license as a PEP 639 license expression: itself when it is an SPDX
    expression, else `LicenseRef-<text>` (kernel-builder takes any text, e.g. "other", the
    Hub's model-card value for a license SPDX does not list)."""
    try:
        return canonicalize_license_expression(text)
    except InvalidLicenseExpression:
        name = re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-") or "unknown"
        return f"LicenseRef-{name}"


def _from_build_toml(path: Path) -> Project:
    """A kernel-builder project: its package is `torch-ext/<name>`; a `pyproject.toml` next to
    `build.toml` (if any) gives `[project]` metadata and `[tool.kernelpack]` settings."""
    facts = buildtoml.read(path)
    root = facts.root
    pyproject: Path | None = root / "pyproject.toml"
    data: dict[str, Any] = {}
    settings = Settings()
    if pyproject is not None and pyproject.is_file():
        data = read_toml(pyproject)
        settings = Settings.from_pyproject(pyproject, data) or Settings(source=pyproject)
    else:
        pyproject = None
    table = dict(_project_table(data))
    table.setdefault("name", facts.name)
    table.setdefault("version", str(facts.version))
    if facts.license is not None:
        table.setdefault("license", _license_expression(facts.license))
    requires = buildtoml.requirements(facts)
    if requires:
        table.setdefault("dependencies", list(requires))
    return Project(
        root=root,
        pyproject=pyproject,
        dist_name=canonicalize_name(str(table["name"])),
        version=str(table["version"]),
        manifest_path=facts.path,
        package=facts.python_name,
        package_dir=facts.package_dir,
        settings=settings,
        metadata=table,
    )


def _from_manifest(manifest: Path) -> Project:
    package_dir = manifest.parent
    candidates = [package_dir.parent]
    if package_dir.parent.name == "src":
        candidates.append(package_dir.parent.parent)
    for folder in candidates:
        pyproject = folder / "pyproject.toml"
        if not pyproject.is_file():
            continue
        data = read_toml(pyproject)
        settings = Settings.from_pyproject(pyproject, data) or Settings(source=pyproject)
        if (
            settings.manifest is not None
            and _manifest_file(settings.manifest).resolve() != manifest.resolve()
        ):
            continue  # that project's manifest is another one: this package is not its own
        return _project(folder, pyproject, data, manifest, settings)
    return _project(package_dir.parent, None, {}, manifest, Settings())


def _from_pyproject(pyproject: Path) -> Project:
    root = pyproject.parent
    shown = display_path(pyproject)
    data = read_toml(pyproject)
    settings = Settings.from_pyproject(pyproject, data)
    names_manifest = settings is not None and settings.manifest is not None
    if not names_manifest and (root / buildtoml.BUILD_TOML).is_file():
        project = _from_build_toml(root / buildtoml.BUILD_TOML)
        return replace(project, found=f"{display_path(project.manifest_path)} (kernel-builder)")
    if settings is None:
        manifest, found = _by_project_name(root, data, shown)
        project = _project(root, pyproject, data, manifest, Settings(source=pyproject))
        return replace(project, found=found)
    if settings.manifest is not None:
        manifest = _manifest_file(settings.manifest)
        if not manifest.is_file():
            raise ManifestError(
                shown,
                f'"{display_path(settings.manifest)}" is not a {MANIFEST_NAME} or a folder '
                "holding one",
                kernel="tool.kernelpack",
                key="manifest",
                expected=f"expected a path to {MANIFEST_NAME}, relative to the project root",
            )
        return _project(root, pyproject, data, manifest, settings)
    return _project(root, pyproject, data, _find_manifest(root, data, shown), settings)


def _by_project_name(root: Path, data: dict[str, Any], shown: str) -> tuple[Path, str]:
    """A repository root without `[tool.kernelpack]` (the seed's layout): the manifest is
    `<name>/kernels.toml` or `src/<name>/kernels.toml`, `<name>` from `[project].name`."""
    name = _project_table(data).get("name")
    if not isinstance(name, str):
        raise ManifestError(
            shown,
            f"no [tool.kernelpack] table and no [project].name to find the {MANIFEST_NAME} by",
            expected='expected [tool.kernelpack] manifest = "<package>/kernels.toml"',
        )
    package = canonicalize_name(name).replace("-", "_")
    looked = [f"{package}/{MANIFEST_NAME}", f"src/{package}/{MANIFEST_NAME}"]
    found = [root / rel for rel in looked if (root / rel).is_file()]
    if len(found) != 1:
        problem = (
            f"found both {looked[0]} and {looked[1]}"
            if found
            else f"found neither {looked[0]} nor {looked[1]}"
        )
        raise ManifestError(
            shown,
            f'no [tool.kernelpack] table, and [project].name "{name}": {problem}',
            expected=f'expected [tool.kernelpack] manifest = "<package>/{MANIFEST_NAME}"',
        )
    relative = found[0].relative_to(root).as_posix()
    return found[0], f'{relative} (from [project].name "{name}" in {shown})'


def _find_manifest(root: Path, data: dict[str, Any], shown: str) -> Path:
    name = _project_table(data).get("name")
    if isinstance(name, str):
        import_name = canonicalize_name(name).replace("-", "_")
        for folder in (root / import_name, root / "src" / import_name):
            if (folder / MANIFEST_NAME).is_file():
                return folder / MANIFEST_NAME
    found = sorted({*root.glob(f"*/{MANIFEST_NAME}"), *root.glob(f"src/*/{MANIFEST_NAME}")})
    if len(found) == 1:
        return found[0]
    if not found:
        problem = f"no <package>/{MANIFEST_NAME} or src/<package>/{MANIFEST_NAME} found"
    else:
        problem = "several manifests (" + ", ".join(str(p.relative_to(root)) for p in found) + ")"
    raise ManifestError(
        shown,
        problem,
        kernel="tool.kernelpack",
        key="manifest",
        expected=f'expected manifest = "<package>/{MANIFEST_NAME}"',
    )


def _project(
    root: Path, pyproject: Path | None, data: dict[str, Any], manifest: Path, settings: Settings
) -> Project:
    package_dir = manifest.parent
    table = _project_table(data)
    name = table.get("name")
    version = table.get("version")
    return Project(
        root=root,
        pyproject=pyproject,
        dist_name=canonicalize_name(name if isinstance(name, str) else package_dir.name),
        version=version if isinstance(version, str) else "0.0.0",
        manifest_path=manifest,
        package=package_dir.name,
        package_dir=package_dir,
        settings=settings,
        metadata=table,
    )


def _project_table(data: dict[str, Any]) -> dict[str, Any]:
    table = data.get("project")
    return table if isinstance(table, dict) else {}


def _manifest_file(path: Path) -> Path:
    return path / MANIFEST_NAME if path.is_dir() else path


def locate_package(text: str) -> str:
    """The import name of the kernel package PKG names, made importable from where it lies.

    As pip reads a requirement: PKG is a path when it holds a path separator or starts with
    `.` (a package folder, source tree or installed; a `kernels.toml`; a project folder that
    `kernelpack build` accepts), and then the folder holding the package is put first on
    `sys.path`, so that copy is the one imported. Otherwise it is an installed package: an
    import name (`llm_ops`), or a distribution name (`llm-ops`) whose files hold a build
    record, even when a folder of that name lies in the working folder. A PKG that is none
    of these is a `UsageError`.
    """
    import os
    import sys

    separators = {os.sep, os.altsep} - {None}
    if text.startswith(".") or any(sep in text for sep in separators if sep):
        path = Path(text)
        if not path.exists():
            raise UsageError(f"{text}: no such package or project folder")
        folder = _package_folder(path)
        parent = str(folder.parent.absolute())
        if parent in sys.path:
            sys.path.remove(parent)
        sys.path.insert(0, parent)
        return folder.name
    if all(part.isidentifier() for part in text.split(".")):
        return text
    package = _distribution_package(text)
    if package is None:
        raise UsageError(
            f"{text}: not an installed package or distribution; a folder is named by a path "
            f"(./{text})"
        )
    return package


def _distribution_package(name: str) -> str | None:
    """The kernel package (the folder holding a build record) of distribution `name`."""
    from importlib import metadata

    try:
        files = metadata.distribution(name).files or []
    except (metadata.PackageNotFoundError, ValueError):
        return None
    for file in files:
        parts = file.parts
        if len(parts) == 2 and parts[1] == "_kernelpack.json":
            return str(parts[0])
    return None


def _package_folder(path: Path) -> Path:
    target = path.absolute()
    if target.is_dir() and (target / "__init__.py").is_file():
        return target  # a package folder, installed or a source tree
    return locate(target).package_dir.absolute()  # UsageError naming what it expected
