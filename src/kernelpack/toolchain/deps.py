"""Named header-only dependencies (`depends = ["cutlass"]`) and their include folders.

Built in: `cutlass`, the CUTLASS/CuTe headers of the `nvidia-cutlass` wheel
(`cutlass_library/source/include`). A project adds its own in `[tool.kernelpack.deps]`
(name -> folder relative to the project root, or an installed Python package), which may
also replace a built-in one. `KERNELPACK_<NAME>_DIR` (e.g. `KERNELPACK_CUTLASS_DIR`) overrides
any of them on one machine.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterable
from pathlib import Path

from kernelpack.errors import ManifestError, UsageError
from kernelpack.project._toml import display_path
from kernelpack.project.settings import BUILTIN_DEPS, Settings
from kernelpack.toolchain.environment import BuildEnvironment, dep_variable

__all__ = ["BUILTIN_DEPS", "include_dirs", "known_deps", "resolve"]

# Inside the cutlass_library package (and a CUTLASS checkout): the header folders to add.
_CUTLASS_INCLUDES = (("include",), ("tools", "util", "include"))


def known_deps(settings: Settings | None) -> frozenset[str]:
    """Every name `depends` may hold for a project with these settings."""
    return (settings or Settings()).dep_names


def resolve(
    name: str, settings: Settings, root: Path, environment: BuildEnvironment | None = None
) -> tuple[Path, ...]:
    """The include folders of dependency `name` for a project with `settings` rooted at
    `root` (`KERNELPACK_<NAME>_DIR` from `environment`, default: read from `os.environ`);
    raise (one line) when it cannot be found on this machine."""
    if environment is None:
        environment = BuildEnvironment.from_environ(os.environ)
    override = dict(environment.dep_dirs).get(dep_variable(name))
    if override is not None:
        return _from_override(name, override)
    target = settings.deps.get(name)
    if target is not None:
        return _from_setting(name, target, settings, root)
    if name == "cutlass" or re.fullmatch(r"cutlass_\d+_\d+", name):
        return _cutlass()
    known = ", ".join(sorted(known_deps(settings)))
    raise UsageError(
        f"unknown dependency {name!r}; expected one of {known} or a [tool.kernelpack.deps] entry"
    )


def include_dirs(
    names: Iterable[str],
    settings: Settings,
    root: Path,
    environment: BuildEnvironment | None = None,
) -> tuple[Path, ...]:
    """The include folders of every dependency in `names`, in order and without repeats;
    raise (one line) for the first that cannot be found here."""
    found = (folder for name in names for folder in resolve(name, settings, root, environment))
    return tuple(dict.fromkeys(found))


def _from_override(name: str, folder: Path) -> tuple[Path, ...]:
    variable = dep_variable(name)
    if not folder.is_dir():
        raise UsageError(f"{variable}={folder}: not a folder; expected the headers of {name!r}")
    if name == "cutlass":
        return _cutlass_folders(folder) or (folder.absolute(),)
    include = folder / "include"
    return (include.absolute(),) if include.is_dir() else (folder.absolute(),)


def _from_setting(name: str, target: str, settings: Settings, root: Path) -> tuple[Path, ...]:
    source = settings.source or root / "pyproject.toml"
    shown = display_path(source)
    folder = root / target
    if folder.is_dir():
        return (folder.resolve(),)
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", target):
        package = _package_folder(target)
        if package is None:
            raise ManifestError(
                shown,
                f'"{target}" is neither a folder nor an installed package',
                kernel="tool.kernelpack.deps",
                key=name,
                expected=f"expected to install {target} or set {dep_variable(name)}",
            )
        include = package / "include"
        return (include if include.is_dir() else package,)
    raise ManifestError(
        shown,
        f'folder "{target}" does not exist',
        kernel="tool.kernelpack.deps",
        key=name,
        expected=f"expected a folder in {display_path(root)} or {dep_variable(name)}=<folder>",
    )


def _cutlass() -> tuple[Path, ...]:
    package = _package_folder(BUILTIN_DEPS["cutlass"])
    folders = _cutlass_folders(package / "source") if package is not None else ()
    if not folders:
        raise UsageError(
            "dependency 'cutlass': the CUTLASS headers are not installed; expected "
            "`pip install --no-deps nvidia-cutlass` or KERNELPACK_CUTLASS_DIR=<cutlass checkout>"
        )
    return folders


def _cutlass_folders(root: Path) -> tuple[Path, ...]:
    """CUTLASS's include folders below a checkout or the wheel's `source/` folder."""
    if (root / "cutlass").is_dir():  # already an include folder
        return (root.absolute(),)
    found = tuple(root.joinpath(*parts) for parts in _CUTLASS_INCLUDES)
    if not found[0].joinpath("cutlass").is_dir():
        return ()
    return tuple(p.absolute() for p in found if p.is_dir())


def _package_folder(module: str) -> Path | None:
    """The folder of an installed package, found without importing it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).absolute()
