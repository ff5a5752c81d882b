"""Named header-only dependencies (`depends = ["cutlass"]`) and their include folders.

Built in: `cutlass`, the CUTLASS/CuTe headers of the installed `nvidia-cutlass` wheel
(`cutlass_library/source/include`), whatever its version; and `cutlass_X_Y`, CUTLASS X.Y
exactly as kernel-builder names it (`kernelpack.project.dependencies.PINNED_DEPS`), found by
`kernelpack.toolchain.cutlass`: an installed wheel of that version, else the release's wheel
or source archive, fetched once into kernelpack's cache and checked against a sha256 table.
A project adds its own in `[tool.kernelpack.deps]` (name -> folder relative to the project
root, or an installed Python package), which may also replace a built-in one.
`KERNELPACK_<NAME>_DIR` (`KERNELPACK_CUTLASS_DIR`, `KERNELPACK_CUTLASS_4_0_DIR`) overrides any
of them on one machine.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from packaging.version import Version

from kernelpack.errors import ManifestError, UsageError
from kernelpack.project._toml import display_path
from kernelpack.project.dependencies import (
    BUILTIN_DEPS,
    KERNEL_BUILDER_DEPS,
    PINNED_DEPS,
    is_known,
    known_names,
)
from kernelpack.project.settings import Settings
from kernelpack.toolchain import cutlass
from kernelpack.toolchain.archives import ArchiveCache
from kernelpack.toolchain.environment import BuildEnvironment, dep_variable
from kernelpack.toolchain.torchprobe import cache_dir

__all__ = [
    "ALLOW_NEAREST_HELP",
    "BUILTIN_DEPS",
    "KERNEL_BUILDER_DEPS",
    "PINNED_DEPS",
    "allowing_nearest",
    "cache_root",
    "include_dirs",
    "is_known",
    "known_deps",
    "resolve",
    "sources_for",
]

#: Where a warning (`--allow-nearest`) goes by default: one line on stderr.
Warn = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


#: The `--allow-nearest` option's help, the same for every verb that has it.
ALLOW_NEAREST_HELP = (
    "a pinned dependency (cutlass_X_Y) not available here may use the nearest available "
    "version, with a warning (KERNELPACK_ALLOW_NEAREST=1)"
)


def allowing_nearest(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` with `KERNELPACK_ALLOW_NEAREST=1`: what `--allow-nearest` asks for."""
    return {**environ, "KERNELPACK_ALLOW_NEAREST": "1"}


def cache_root(environment: BuildEnvironment) -> Path:
    """The folder of unpacked dependency archives: `<kernelpack cache>/deps`."""
    return cache_dir(environment.inherited) / "deps"


def known_deps(settings: Settings | None) -> frozenset[str]:
    """Every name `depends` may hold for a project with these settings."""
    return (settings or Settings()).dep_names


def resolve(
    name: str,
    settings: Settings,
    root: Path,
    environment: BuildEnvironment | None = None,
    *,
    warn: Warn = _stderr,
    sources: cutlass.Sources | None = None,
) -> tuple[Path, ...]:
    """The include folders of dependency `name` for a project with `settings` rooted at
    `root` (`KERNELPACK_<NAME>_DIR`, the mirror, `--allow-nearest` from `environment`,
    default: read from `os.environ`); raise (one line) when it cannot be found on this
    machine. `warn` gets the one line of a nearer version (`--allow-nearest`); `sources`
    (default: this machine's cache, mirror and installed wheel) is where pinned releases
    come from."""
    if environment is None:
        environment = BuildEnvironment.from_environ(os.environ)
    override = dict(environment.dep_dirs).get(dep_variable(name))
    if override is not None:
        return _from_override(name, override)
    target = settings.deps.get(name)
    if target is not None:
        return _from_setting(name, target, settings, root)
    if name == "cutlass":
        return _cutlass()
    if name in PINNED_DEPS:
        found = cutlass.pinned(
            name,
            sources or sources_for(environment),
            allow_nearest=environment.allow_nearest,
            warn=warn,
        )
        return found.folders
    known = ", ".join(known_names(settings.deps))
    raise UsageError(
        f"unknown dependency {name!r}; expected one of {known} or a [tool.kernelpack.deps] entry"
    )


def include_dirs(
    names: Iterable[str],
    settings: Settings,
    root: Path,
    environment: BuildEnvironment | None = None,
    *,
    warn: Warn = _stderr,
) -> tuple[Path, ...]:
    """The include folders of every dependency in `names`, in order and without repeats;
    raise (one line) for the first that cannot be found here."""
    found = (
        folder for name in names for folder in resolve(name, settings, root, environment, warn=warn)
    )
    return tuple(dict.fromkeys(found))


def sources_for(
    environment: BuildEnvironment,
    *,
    source_sha256: Mapping[Version, str] = cutlass.SOURCE_SHA256,
    wheels: Mapping[Version, tuple[str, str]] = cutlass.WHEELS,
) -> cutlass.Sources:
    """Where pinned releases come from on this machine: the cache below `cache_root`, the
    mirror `environment` names, the installed `nvidia-cutlass` wheel, and the digest tables
    (kernelpack's own unless given)."""
    return cutlass.Sources(
        cache=ArchiveCache(
            cache_root(environment), lock_timeout=environment.lock_timeout, announce=_stderr
        ),
        mirror=environment.deps_mirror,
        installed=_package_folder(BUILTIN_DEPS["cutlass"]),
        source_sha256=source_sha256,
        wheels=wheels,
    )


def _from_override(name: str, folder: Path) -> tuple[Path, ...]:
    variable = dep_variable(name)
    if not folder.is_dir():
        raise UsageError(f"{variable}={folder}: not a folder; expected the headers of {name!r}")
    if name == "cutlass" or name in PINNED_DEPS:
        return cutlass.cutlass_folders(folder) or (folder.absolute(),)
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
    folders = cutlass.cutlass_folders(package / "source") if package is not None else ()
    if not folders:
        raise UsageError(
            "dependency 'cutlass': the CUTLASS headers are not installed; expected "
            "`pip install --no-deps nvidia-cutlass` or KERNELPACK_CUTLASS_DIR=<cutlass checkout>"
        )
    return folders


def _package_folder(module: str) -> Path | None:
    """The folder of an installed package, found without importing it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).absolute()
