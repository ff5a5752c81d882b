"""`kernels.toml`: the one manifest of a kernel package, parsed into frozen, typed values.

`load()` reads one file (and the project's `pyproject.toml` `[tool.kernelpack]` table, see
`kernelpack.settings`) and either returns a `Manifest` or raises `ManifestError` with a
one-line message naming the file, the kernel and the key.
"""

from __future__ import annotations

import difflib
import keyword
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, cast

from packaging.version import Version

from kernelpack._toml import (
    ANY_PLATFORM,
    PLATFORMS,
    Table,
    describe,
    display_path,
    is_inside,
    read_toml,
)
from kernelpack.deps import known_deps
from kernelpack.errors import ManifestError
from kernelpack.settings import Settings
from kernelpack_runtime.arch import Arch

__all__ = ["ALL_PLATFORMS", "ANY_PLATFORM", "KERNEL_KEYS", "Abi", "KernelSpec", "Manifest", "load"]

Abi = Literal["torch", "stable"]

#: Platform names (`platform.machine()`) a manifest may name.
ALL_PLATFORMS = PLATFORMS

_STABLE_TARGET_DEFAULT = Version("2.10")


@dataclass(frozen=True)
class KernelSpec:
    """One `[<name>]` table of `kernels.toml`, with paths resolved against its folder."""

    name: str
    folder: Path
    """Absolute path of the kernel folder, `<package_dir>/<name>`."""
    ops: str
    """torch.ops namespace; default `<package>_<name>`."""
    sources: tuple[Path, ...]
    """Absolute, globs expanded, sorted, de-duplicated. Empty when `missing_sources` is set."""
    arch: Mapping[str, tuple[Arch, ...]]
    """Platform (`x86_64`, `aarch64`) or `ANY_PLATFORM` -> archs. Use `archs_for()`."""
    abi: Abi = "torch"
    description: str = ""
    include_dirs: tuple[Path, ...] = ()
    cxx_std: int | None = None
    """None: the default for the abi and torch (17 stable, 20 for torch >= 2.14 classic)."""
    stable_target: Version = _STABLE_TARGET_DEFAULT
    ptx: bool = False
    min_cuda: Version | None = None
    platforms: tuple[str, ...] | None = None
    """None: every platform."""
    depends: tuple[str, ...] = ()
    nvcc_flags: tuple[str, ...] = ()
    cxx_flags: tuple[str, ...] = ()
    defines: Mapping[str, str] = field(default_factory=dict)
    libraries: tuple[str, ...] = ()
    missing_sources: str | None = None
    """Set (to a one-line message) only when loaded with `allow_missing_sources=True` and a
    source is absent, e.g. an uninitialised git submodule; the plan skips `sources-missing`."""

    def archs_for(self, machine: str) -> tuple[Arch, ...] | None:
        """The archs to build on `machine`, or None when the arch table omits it."""
        if ANY_PLATFORM in self.arch:
            return self.arch[ANY_PLATFORM]
        return self.arch.get(machine)


@dataclass(frozen=True)
class Manifest:
    """A parsed `kernels.toml`."""

    path: Path
    """Absolute path of `kernels.toml`."""
    package: str
    """Import name of the kernel package (the folder holding `kernels.toml`)."""
    package_dir: Path
    kernels: tuple[KernelSpec, ...]

    def kernel(self, name: str) -> KernelSpec:
        for spec in self.kernels:
            if spec.name == name:
                return spec
        raise KeyError(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(spec.name for spec in self.kernels)


#: Keys a kernel table may hold.
KERNEL_KEYS = (
    "description",
    "ops",
    "sources",
    "include-dirs",
    "arch",
    "cxx-std",
    "cxx-flags",
    "nvcc-flags",
    "abi",
    "stable-target",
    "ptx",
    "min-cuda",
    "platforms",
    "depends",
    "defines",
    "libraries",
)

_CXX_STDS = (17, 20, 23)
_MIN_STABLE_TARGET = Version("2.10")
# Kernel names that would shadow the package's runtime API (`pkg.load` is a function; a
# subpackage `pkg/load/` would replace it on import).
_RESERVED_NAMES = frozenset({"status", "is_available", "unavailable_reason", "load", "_C"})
_GLOB_CHARS = frozenset("*?[")
_C_IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LIBRARY_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+\-]*")


def load(
    path: Path,
    *,
    settings: Settings | None = None,
    allow_missing_sources: bool = False,
) -> Manifest:
    """Parse `path` (a `kernels.toml`); raise `ManifestError` on any problem.

    `settings` (the project's `[tool.kernelpack]`) supply default `abi` and `arch` and the
    project's extra `depends` names. With `allow_missing_sources`, a kernel whose sources are
    absent (an uninitialised git submodule) is returned with `missing_sources` set instead of
    raising; the build skips it as `sources-missing`.
    """
    path = Path(path).absolute()
    shown = display_path(path)
    data = read_toml(path)
    package_dir = path.parent
    package = package_dir.name
    if not package.isidentifier() or keyword.iskeyword(package):
        raise ManifestError(
            shown,
            f'the package folder "{package}" is not a Python import name',
            expected="expected kernels.toml in a package folder (e.g. llm_ops/kernels.toml)",
        )
    if not data:
        raise ManifestError(
            shown, "declares no kernel", expected="expected at least one [<name>] table"
        )
    context = _Context(
        shown=shown,
        package=package,
        package_dir=package_dir,
        root=package_dir.resolve(),
        settings=settings or Settings(),
        allow_missing_sources=allow_missing_sources,
    )
    kernels = tuple(_kernel(context, name, table) for name, table in data.items())
    return Manifest(path=path, package=package, package_dir=package_dir, kernels=kernels)


@dataclass(frozen=True)
class _Context:
    shown: str
    package: str
    package_dir: Path
    root: Path
    """The package folder with symlinks resolved: nothing may point outside it."""
    settings: Settings
    allow_missing_sources: bool


def _kernel(context: _Context, name: str, value: object) -> KernelSpec:
    if not isinstance(value, dict):
        raise ManifestError(
            context.shown,
            f"got {describe(value)}",
            kernel=name,
            expected=f"expected a [{name}] table (a kernel) with sources and arch",
        )
    _check_name(context.shown, name)
    table = Table(context.shown, name, value)
    table.check_keys(KERNEL_KEYS)
    folder = context.package_dir / name
    arch = table.arch("arch") or context.settings.arch
    if arch is None:
        raise table.error(
            "arch", "is missing", 'expected e.g. arch = "9.0a" (or a default in [tool.kernelpack])'
        )
    abi = table.choice("abi", ("torch", "stable")) or context.settings.abi or "torch"
    missing: list[tuple[str, str]] = []
    sources = _sources(context, table, folder, missing)
    include_dirs = _include_dirs(context, table, folder, missing)
    missing_sources = None
    if missing:
        if not context.allow_missing_sources:
            raise _missing_error(table, missing[0])
        sources = ()
        key, problem = missing[0]
        missing_sources = f"{display_path(folder)}: {key} {problem}"

    return KernelSpec(
        name=name,
        folder=folder,
        ops=_ops(table, context.package),
        sources=sources,
        arch=arch,
        abi=cast(Abi, abi),
        description=table.string("description") or "",
        include_dirs=include_dirs,
        cxx_std=_cxx_std(table),
        stable_target=_stable_target(table),
        ptx=bool(table.boolean("ptx")),
        min_cuda=table.version("min-cuda", example="12.8"),
        platforms=table.platforms("platforms"),
        depends=_depends(table, context.settings),
        nvcc_flags=table.strings("nvcc-flags", expected="nvcc flags"),
        cxx_flags=table.strings("cxx-flags", expected="C++ compiler flags"),
        defines=_defines(table),
        libraries=_libraries(table),
        missing_sources=missing_sources,
    )


def _check_name(shown: str, name: str) -> None:
    """A kernel name is its folder and module: an importable identifier."""
    if not name.isidentifier() or not name.isascii():
        raise ManifestError(
            shown,
            "the kernel name is not a Python identifier",
            kernel=name,
            expected="expected a name such as rmsnorm (it names the kernel's folder and module)",
        )
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        raise ManifestError(
            shown,
            "the kernel name is a Python keyword",
            kernel=name,
            expected="expected a name that is not a keyword (e.g. add a suffix)",
        )
    if name in _RESERVED_NAMES:
        raise ManifestError(
            shown,
            f"the kernel name shadows the package's {name}",
            kernel=name,
            expected=f"expected a name other than {', '.join(sorted(_RESERVED_NAMES))}",
        )


def _ops(table: Table, package: str) -> str:
    ops = table.string("ops", expected="a torch.ops namespace such as llm_ops_rmsnorm")
    if ops is None:
        return f"{package}_{table.name}"
    if not _C_IDENTIFIER_RE.fullmatch(ops):
        raise table.error("ops", f'"{ops}" is not an identifier', "expected e.g. llm_ops_rmsnorm")
    return ops


def _stable_target(table: Table) -> Version:
    target = table.version("stable-target", example="2.10")
    if target is None:
        return _STABLE_TARGET_DEFAULT
    if target < _MIN_STABLE_TARGET:
        raise table.error(
            "stable-target",
            f'"{target}" is below the oldest stable ABI target',
            f'expected "{_MIN_STABLE_TARGET}" or later',
        )
    return target


def _cxx_std(table: Table) -> int | None:
    value = table.data.get("cxx-std")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value not in _CXX_STDS:
        expected = f"expected one of {', '.join(map(str, _CXX_STDS))}"
        raise table.error("cxx-std", f"got {describe(value)}", expected)
    return value


def _depends(table: Table, settings: Settings) -> tuple[str, ...]:
    depends = table.strings("depends", expected="dependency names")
    known = sorted(known_deps(settings))
    for dep in depends:
        if dep not in known:
            close = difflib.get_close_matches(dep, known, n=1)
            hint = f'did you mean "{close[0]}"? ' if close else ""
            raise table.error(
                "depends",
                f'unknown dependency "{dep}"',
                f"{hint}expected one of {', '.join(known)} or a name in [tool.kernelpack.deps]",
            )
    return tuple(dict.fromkeys(depends))


def _libraries(table: Table) -> tuple[str, ...]:
    libraries = table.strings("libraries", expected="library names such as cublas")
    for library in libraries:
        if not _LIBRARY_RE.fullmatch(library):
            raise table.error(
                "libraries", f'"{library}" is not a library name', "expected e.g. cublas"
            )
    return tuple(dict.fromkeys(libraries))


def _missing_error(table: Table, missing: tuple[str, str]) -> ManifestError:
    key, problem = missing
    what = "folders" if key == "include-dirs" else "files"
    return table.error(key, problem, f"expected existing {what}, relative to the kernel's folder")


def _sources(
    context: _Context, table: Table, folder: Path, missing: list[tuple[str, str]]
) -> tuple[Path, ...]:
    if "sources" not in table.data:
        raise table.error("sources", "is missing", 'expected e.g. sources = ["csrc/kernel.cu"]')
    patterns = table.strings("sources", expected="file paths or globs", allow_empty=False)
    found: dict[Path, None] = {}
    for pattern in patterns:
        _check_relative(context, table, "sources", pattern, folder)
        if _GLOB_CHARS.intersection(pattern):
            matches = sorted(p for p in folder.glob(pattern) if p.is_file())
            if not matches:
                missing.append(("sources", f'"{pattern}" matches no file'))
            for match in matches:
                found[_checked(context, table, "sources", pattern, match)] = None
            continue
        source = _checked(context, table, "sources", pattern, folder / pattern)
        if not source.exists():
            missing.append(("sources", f'"{pattern}" does not exist'))
        elif not source.is_file():
            raise table.error("sources", f'"{pattern}" is not a file', "expected a source file")
        else:
            found[source] = None
    return tuple(sorted(found))


def _include_dirs(
    context: _Context, table: Table, folder: Path, missing: list[tuple[str, str]]
) -> tuple[Path, ...]:
    dirs: dict[Path, None] = {}
    for entry in table.strings("include-dirs", expected="folders"):
        _check_relative(context, table, "include-dirs", entry, folder)
        include = _checked(context, table, "include-dirs", entry, folder / entry)
        if not include.exists():
            missing.append(("include-dirs", f'"{entry}" does not exist'))
        elif not include.is_dir():
            raise table.error("include-dirs", f'"{entry}" is not a folder', "expected a folder")
        dirs[include] = None
    return tuple(dirs)


def _check_relative(context: _Context, table: Table, key: str, entry: str, folder: Path) -> None:
    if Path(entry).is_absolute() or entry.startswith("~"):
        raise table.error(
            key, f'"{entry}" is an absolute path', "expected a path relative to the kernel's folder"
        )
    if not is_inside(Path(os.path.normpath(folder / entry)), context.package_dir):
        raise table.error(
            key,
            f'"{entry}" points outside the package',
            f"expected a path inside {display_path(context.package_dir)}",
        )


def _checked(context: _Context, table: Table, key: str, entry: str, path: Path) -> Path:
    """`path` normalised; raise when it (or a symlink on the way) leaves the package."""
    normal = Path(os.path.normpath(path))
    if not is_inside(normal.resolve(), context.root):
        raise table.error(
            key,
            f'"{entry}" resolves outside the package (symlink to {normal.resolve()})',
            f"expected a path inside {display_path(context.package_dir)}",
        )
    return normal


def _defines(table: Table) -> dict[str, str]:
    value = table.data.get("defines")
    if value is None:
        return {}
    expected = 'expected a table such as { BLOCK_M = "128" } (values: string, integer or boolean)'
    if not isinstance(value, dict):
        raise table.error("defines", f"got {describe(value)}", expected)
    defines: dict[str, str] = {}
    for macro, item in value.items():
        key = f"defines.{macro}"
        if not _C_IDENTIFIER_RE.fullmatch(macro):
            raise table.error(key, "is not a C macro name", "expected an identifier")
        if isinstance(item, bool):
            defines[macro] = "1" if item else "0"
        elif isinstance(item, (str, int)):
            defines[macro] = str(item)
        else:
            raise table.error(key, f"got {describe(item)}", "expected a string, integer or boolean")
    return defines
