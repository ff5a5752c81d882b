"""`kernels.toml`: the one manifest of a kernel package, parsed into frozen, typed values.

Each key of a kernel table is declared once, as a `Key` in the metadata of its `KernelSpec`
field. The key list (`KERNEL_KEYS`), `KernelSpec.to_json()` (`kernelpack check --json`), the
key table of docs/manifest.md and `schema/kernels.schema.json` are made from those
declarations (`python -m kernelpack.project._schema --write`), and a test fails when one drifts.

`load()` reads one file (and the project's `[tool.kernelpack]` table, see
`kernelpack.project.settings`) and either returns a `Manifest` or raises `ManifestErrors`: every
problem found, one line each, naming the file, the kernel and the key, in file order.
No value that nvcc would hand to its own shell gets through (see `kernelpack.project._shell`).
"""

from __future__ import annotations

import difflib
import keyword
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, cast

from packaging.version import Version

from kernelpack.errors import ManifestError, ManifestErrors
from kernelpack.project._shell import pattern, unsafe
from kernelpack.project._toml import (
    ANY_PLATFORM,
    ARCH_SCHEMA,
    MAX_BYTES,
    MAX_ITEMS,
    PLATFORMS,
    Key,
    Table,
    declared_keys,
    describe,
    display_path,
    is_inside,
    key_metadata,
    path_too_long,
    quote,
    read_document,
)
from kernelpack.project.settings import Settings
from kernelpack_runtime.arch import Arch
from kernelpack_runtime.reason import Reason

__all__ = [
    "ALL_PLATFORMS",
    "ANY_PLATFORM",
    "KERNEL_KEYS",
    "KEYS",
    "MAX_KERNELS",
    "Abi",
    "Backend",
    "CompileRules",
    "KernelSpec",
    "Key",
    "Manifest",
    "Part",
    "load",
]

Abi = Literal["torch", "stable"]
Backend = Literal["cuda", "cpu"]
CompileRules = Literal["kernelpack", "kernel-builder"]
"""Whose defaults a kernel's compiles follow: kernelpack's (BuildExtension's nvcc flags, the
C++ standard torch needs) or kernel-builder's (its nvcc defines, C++17 below torch 2.12 and
C++20 from it, `-fno-gnu-unique`), for `build.toml` projects."""

#: Platform names (`platform.machine()`) a manifest may name.
ALL_PLATFORMS = PLATFORMS

#: Most kernels one manifest may declare (each costs file-system checks).
MAX_KERNELS = 1000

_STABLE_TARGET_DEFAULT = Version("2.10")
_CXX_STDS = (17, 20, 23)
_IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]*$"
_C_IDENTIFIER_RE = re.compile(_IDENTIFIER.strip("^$"))
_LIBRARY = r"^[A-Za-z0-9_][A-Za-z0-9_.+\-]*$"
_LIBRARY_RE = re.compile(_LIBRARY.strip("^$"))
_VERSION = r"^\d+(\.\d+){1,2}$"
_VERSION_RE = re.compile(r"\d+(\.\d+){1,2}")
# The largest integer a `defines` value may be: C's long long.
_MAX_DEFINE_INT = 2**63


def _strings(kind: Literal["define", "flag", "path", "glob"] | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "string", "minLength": 1}
    if kind is not None:
        item["pattern"] = pattern(kind)
    return {"type": "array", "items": item, "maxItems": MAX_ITEMS}


_VERSION_SCHEMA = {"type": "string", "pattern": _VERSION}


@dataclass(frozen=True)
class Part:
    """Sources of a library compiled with settings of their own, then linked into it: one
    kernel of a `build.toml` project (its `cuda-capabilities`, flags, includes, CUDA floor),
    as kernel-builder compiles each kernel of a project into the project's one extension."""

    name: str
    """The kernel's name in its manifest (`[kernel.<name>]`)."""
    sources: tuple[Path, ...]
    arch: tuple[Arch, ...] = ()
    """Its archs (CUDA parts; none for a CPU part)."""
    ptx: tuple[Arch, ...] = ()
    """The archs whose PTX is embedded too (kernel-builder's `+PTX`)."""
    nvcc_flags: tuple[str, ...] = ()
    cxx_flags: tuple[str, ...] = ()
    include_dirs: tuple[Path, ...] = ()
    min_cuda: Version | None = None
    """Below this CUDA release the part is left out of the library (`cuda-minver`)."""


@dataclass(frozen=True)
class KernelSpec:
    """One `[<name>]` table of `kernels.toml`, with paths resolved against its folder.

    A field whose metadata holds a `Key` is a manifest key (`KEYS`); the others are facts
    kernelpack adds (the name, the folder, whether sources are missing).
    """

    name: str
    folder: Path
    """Absolute path of the kernel folder, `<package_dir>/<name>`."""
    namespace: str = field(
        metadata=key_metadata(
            "ops",
            "identifier",
            "`<package>_<kernel>`",
            "the op namespace (`torch.ops.<namespace>`); the record's `namespace`, passed to "
            "the compiler as `KERNELPACK_NAMESPACE`",
            {"type": "string", "pattern": _IDENTIFIER},
        )
    )
    """The op namespace (`torch.ops.<namespace>`), from the key `ops`; default
    `<package>_<name>`."""
    sources: tuple[Path, ...] = field(
        metadata=key_metadata(
            "sources",
            "list of paths/globs",
            "required",
            "`.cu`, `.cpp`, `.cc` files; a glob matching nothing is an error",
            {**_strings("glob"), "minItems": 1},
            required=True,
        )
    )
    """Absolute, globs expanded, sorted, de-duplicated. Empty when `missing_sources` is set."""
    arch: Mapping[str, tuple[Arch, ...]] = field(
        metadata=key_metadata(
            "arch",
            "string, list or per-platform table",
            "`[tool.kernelpack] arch`",
            "exact archs: `9.0a` runs only on sm_90a, `X.Yf` is a family, plain `8.0` also "
            "runs on later minors of 8",
            ARCH_SCHEMA,
        )
    )
    """Platform (`x86_64`, `aarch64`) or `ANY_PLATFORM` -> archs. Use `archs_for()`."""
    abi: Abi = field(
        default="torch",
        metadata=key_metadata(
            "abi",
            '`"torch"` or `"stable"`',
            '`"torch"` (or `[tool.kernelpack] abi`)',
            "classic `at::Tensor` (wheel tied to one torch) or the LibTorch stable ABI (one "
            "wheel for torch >= `stable-target`)",
            {"enum": ["torch", "stable"]},
        ),
    )
    backend: Backend = field(
        default="cuda",
        metadata=key_metadata(
            "backend",
            '`"cuda"` or `"cpu"`',
            '`"cuda"`',
            "`cpu`: plain C++ compiled by the host compiler (no nvcc, no `arch`); usable "
            "without a GPU",
            {"enum": ["cuda", "cpu"]},
        ),
    )
    description: str = field(
        default="",
        metadata=key_metadata(
            "description", "string", '`""`', "one line for humans", {"type": "string"}
        ),
    )
    include_dirs: tuple[Path, ...] = field(
        default=(),
        metadata=key_metadata(
            "include-dirs", "list of folders", "`[]`", "added with `-I`", _strings("path")
        ),
    )
    cxx_std: int | None = field(
        default=None,
        metadata=key_metadata(
            "cxx-std",
            "17, 20 or 23",
            "17 (stable), 20 (classic with torch >= 2.14)",
            "C++ standard; classic ATen headers of torch 2.14 need 20",
            {"enum": list(_CXX_STDS)},
        ),
    )
    """None: the default for the abi and torch (17 stable, 20 for torch >= 2.14 classic)."""
    stable_target: Version = field(
        default=_STABLE_TARGET_DEFAULT,
        metadata=key_metadata(
            "stable-target",
            "version >= 2.10",
            '`"2.10"`',
            '`TORCH_TARGET_VERSION` for `abi = "stable"`',
            _VERSION_SCHEMA,
        ),
    )
    ptx: bool = field(
        default=False,
        metadata=key_metadata(
            "ptx",
            "bool",
            "`false`",
            "embed PTX of the highest arch (JIT-compiled by the driver on newer GPUs)",
            {"type": "boolean"},
        ),
    )
    min_cuda: Version | None = field(
        default=None,
        metadata=key_metadata(
            "min-cuda",
            "version",
            "none",
            "minimum nvcc release; older: skipped as `cuda-too-old`",
            _VERSION_SCHEMA,
        ),
    )
    platforms: tuple[str, ...] | None = field(
        default=None,
        metadata=key_metadata(
            "platforms",
            "list of " + ", ".join(f"`{p}`" for p in PLATFORMS),
            "every platform",
            "where the kernel is built; elsewhere: skipped as `platform-excluded`",
            {"type": "array", "items": {"enum": list(PLATFORMS)}, "minItems": 1},
        ),
    )
    """None: every platform."""
    depends: tuple[str, ...] = field(
        default=(),
        metadata=key_metadata(
            "depends",
            "list of names",
            "`[]`",
            "`cutlass` (the installed `nvidia-cutlass` wheel or `KERNELPACK_CUTLASS_DIR`), "
            "`cutlass_X_Y` (CUTLASS X.Y exactly, e.g. `cutlass_4_0`: docs/build.md) or a name "
            "from `[tool.kernelpack.deps]`",
            _strings(),
        ),
    )
    nvcc_flags: tuple[str, ...] = field(
        default=(),
        metadata=key_metadata(
            "nvcc-flags",
            "list of strings",
            "`[]`",
            "extra flags for nvcc (no shell characters: nvcc hands `-Xcompiler` values to "
            "`sh -c` unquoted)",
            _strings("flag"),
        ),
    )
    cxx_flags: tuple[str, ...] = field(
        default=(),
        metadata=key_metadata(
            "cxx-flags",
            "list of strings",
            "`[]`",
            "extra flags for the host C++ compiler (no shell characters)",
            _strings("flag"),
        ),
    )
    defines: Mapping[str, str] = field(
        default_factory=dict,
        metadata=key_metadata(
            "defines",
            "table of string/int/bool",
            "`{}`",
            "`-DNAME=VALUE`; a value holds no `$`, backquote, quote, backslash or comma",
            {
                "type": "object",
                "propertyNames": {"pattern": _IDENTIFIER},
                "additionalProperties": {
                    "anyOf": [
                        {"type": "string", "pattern": pattern("define")},
                        {"type": "integer"},
                        {"type": "boolean"},
                    ]
                },
            },
        ),
    )
    libraries: tuple[str, ...] = field(
        default=(),
        metadata=key_metadata(
            "libraries",
            "list of names",
            "`[]`",
            "linked with `-l`",
            {"type": "array", "items": {"type": "string", "pattern": _LIBRARY}},
        ),
    )
    missing_sources: str | None = None
    """Set (to a one-line message) only when loaded with `allow_missing_sources=True` and a
    source is absent, e.g. an uninitialised git submodule; the plan skips `sources-missing`."""
    module: str = "_C"
    """The extension module's name: `TORCH_EXTENSION_NAME`, the `PyInit_<module>` symbol and
    the library's file name. `_C` for every `kernels.toml` kernel; a `build.toml` project's
    library is `_<name>_<hash>`, as kernel-builder names it."""
    max_cuda: Version | None = None
    """Skip (`cuda-mismatch`) when nvcc is newer (`build.toml`'s `[general.cuda].maxver`)."""
    min_torch: Version | None = None
    """Skip (`platform-excluded`) when building against an older torch (major.minor;
    `build.toml`'s `[torch].minver`)."""
    max_torch: Version | None = None
    """Skip (`platform-excluded`) when building against a newer torch (`[torch].maxver`)."""
    loose_archs: bool = False
    """`arch` is a wish list (`build.toml`): build the archs this nvcc can build and skip
    (`arch-unsupported`) only when none is left."""
    skip: Reason | None = None
    """A skip the manifest itself decides (a `build.toml` kernel for another backend)."""
    generated_headers: Mapping[str, str] = field(default_factory=dict)
    """Header name -> text, written into a build-folder include directory that is on this
    kernel's include path (`registration.h` for a `build.toml` project that ships none)."""
    parts: tuple[Part, ...] = ()
    """Sources (among `sources`) compiled with settings of their own; the others compile with
    the kernel's. `arch` is then the union of the parts' archs."""
    compile_rules: CompileRules = "kernelpack"

    def __post_init__(self) -> None:
        # Whatever reader made this spec (kernels.toml, another format), no value of it may
        # reach nvcc's shell: checked here once more, so no reader can forget it.
        problem = _shell_problem(self)
        if problem is not None:
            key, text = problem
            raise ManifestError(display_path(self.folder), text, kernel=self.name, key=key or None)

    def archs_for(self, machine: str) -> tuple[Arch, ...] | None:
        """The archs to build on `machine`, or None when the arch table omits it."""
        if ANY_PLATFORM in self.arch:
            return self.arch[ANY_PLATFORM]
        return self.arch.get(machine)

    def to_json(self) -> dict[str, Any]:
        """The kernel's keys as JSON values, by field name (`kernelpack check --json`).

        Paths are relative to the kernel's folder; versions and archs are strings;
        `stable_target` is null unless `abi = "stable"`.
        """
        values = {f.name: _json(getattr(self, f.name), self.folder) for f in _KEYED_FIELDS}
        if self.abi != "stable":
            values["stable_target"] = None
        return values


def _json(value: object, folder: Path) -> Any:
    if isinstance(value, Path):
        return os.path.relpath(value, folder)
    if isinstance(value, (Version, Arch)):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _json(v, folder) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_json(v, folder) for v in value]
    return value


def _shell_problem(spec: KernelSpec) -> tuple[str, str] | None:
    """The first value of `spec` that may not reach nvcc's shell: (key, why), else None."""
    values: list[tuple[str, str, Literal["define", "flag", "path"]]] = [
        *(("defines." + name, value, "define") for name, value in spec.defines.items()),
        *(("nvcc-flags", flag, "flag") for flag in spec.nvcc_flags),
        *(("cxx-flags", flag, "flag") for flag in spec.cxx_flags),
        *(("sources", os.path.relpath(p, spec.folder), "path") for p in spec.sources),
        *(("include-dirs", os.path.relpath(p, spec.folder), "path") for p in spec.include_dirs),
        *(("cuda-flags", flag, "flag") for part in spec.parts for flag in part.nvcc_flags),
        *(("cxx-flags", flag, "flag") for part in spec.parts for flag in part.cxx_flags),
        *(
            ("include", os.path.relpath(p, spec.folder), "path")
            for part in spec.parts
            for p in part.include_dirs
        ),
    ]
    names = [(None, spec.name), ("ops", spec.namespace), *(("defines", n) for n in spec.defines)]
    for key, name in names:
        if not _C_IDENTIFIER_RE.fullmatch(name):
            return (key or "", f"{quote(name)} is not an identifier")
    for library in spec.libraries:
        if not _LIBRARY_RE.fullmatch(library):
            return ("libraries", f"{quote(library)} is not a library name")
    for key, text, kind in values:
        problem = unsafe(text, kind) or (
            None if text.isprintable() else "holds a control character"
        )
        if problem is not None:
            return (key, f"{quote(text)} {problem}")
    return None


_KEYED_FIELDS = tuple(f for f in fields(KernelSpec) if "key" in f.metadata)

#: Every kernel-table key, declared on `KernelSpec`'s fields, in field order.
KEYS: tuple[Key, ...] = declared_keys(KernelSpec)

#: Keys a kernel table may hold.
KERNEL_KEYS: tuple[str, ...] = tuple(key.name for key in KEYS)


@dataclass(frozen=True)
class Manifest:
    """A parsed `kernels.toml`."""

    path: Path
    """Absolute path of `kernels.toml`."""
    package: str
    """Import name of the kernel package (the folder holding `kernels.toml`)."""
    package_dir: Path
    kernels: tuple[KernelSpec, ...]
    generated: Mapping[str, str] = field(default_factory=dict)
    """Files the build writes into the package (path relative to it -> text), e.g. the
    `_ops.py` kernel-builder generates; installed in place and packed into the wheel."""
    notes: tuple[str, ...] = ()
    """Lines for the user that are not errors (an older `build.toml` format read by upgrading
    it in memory); `check` and `build` print them."""

    def kernel(self, name: str) -> KernelSpec:
        for spec in self.kernels:
            if spec.name == name:
                return spec
        raise KeyError(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(spec.name for spec in self.kernels)


# Kernel names that would shadow the package's runtime API (`pkg.load` is a function; a
# subpackage `pkg/load/` would replace it on import).
_RESERVED_NAMES = frozenset({"status", "is_available", "unavailable_reason", "load", "_C"})
_GLOB_CHARS = frozenset("*?[")


def load(
    path: Path,
    *,
    settings: Settings | None = None,
    allow_missing_sources: bool = False,
) -> Manifest:
    """Parse `path` (a `kernels.toml`); raise `ManifestErrors` listing every problem.

    `settings` (the project's `[tool.kernelpack]`) supply default `abi` and `arch` and the
    project's extra `depends` names. With `allow_missing_sources`, a kernel whose sources are
    absent (an uninitialised git submodule) is returned with `missing_sources` set instead of
    raising; the build skips it as `sources-missing`.
    """
    path = Path(path).absolute()
    shown = display_path(path)
    document = read_document(path, max_bytes=MAX_BYTES)
    data = document.data
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
    if len(data) > MAX_KERNELS:
        raise ManifestError(
            shown, f"declares {len(data)} kernels", expected=f"expected at most {MAX_KERNELS}"
        )
    context = _Context(
        shown=shown,
        package=package,
        package_dir=package_dir,
        root=package_dir.resolve(),
        settings=settings or Settings(),
        allow_missing_sources=allow_missing_sources,
    )
    errors: list[ManifestError] = []
    kernels = [_kernel(context, name, table, errors) for name, table in data.items()]
    if errors:
        errors.sort(key=lambda error: document.line(error.kernel, error.key))
        raise ManifestErrors(errors)
    return Manifest(
        path=path,
        package=package,
        package_dir=package_dir,
        kernels=tuple(spec for spec in kernels if spec is not None),
    )


@dataclass(frozen=True)
class _Context:
    shown: str
    package: str
    package_dir: Path
    root: Path
    """The package folder with symlinks resolved: nothing may point outside it."""
    settings: Settings
    allow_missing_sources: bool
    resolved: dict[Path, Path] = field(default_factory=dict)
    """Folder -> the folder with symlinks resolved (a cache for `_resolve`)."""


@dataclass
class _Reader:
    """One kernel table being read: what each key's parser needs."""

    context: _Context
    table: Table
    folder: Path
    missing: dict[str, str] = field(default_factory=dict)
    """Key -> its first absent path (`sources`, `include-dirs`)."""
    errors: list[ManifestError] = field(default_factory=list)
    """Problems beyond the one a parser raises (e.g. one per bad `defines` entry)."""


def _kernel(
    context: _Context, name: str, value: object, errors: list[ManifestError]
) -> KernelSpec | None:
    if not isinstance(value, dict):
        errors.append(
            ManifestError(
                context.shown,
                f"got {describe(value)}",
                kernel=name,
                expected=f"expected a [{name}] table (a kernel) with sources and arch",
            )
        )
        return None
    bad_name = _name_error(context.shown, name)
    if bad_name is not None:
        errors.append(bad_name)
        return None
    table = Table(context.shown, name, value)
    reader = _Reader(context, table, context.package_dir / name)
    found = table.unknown_keys(KERNEL_KEYS)
    values: dict[str, Any] = {}
    for spec_field in _KEYED_FIELDS:
        try:
            values[spec_field.name] = _PARSERS[spec_field.name](reader)
        except ManifestError as exc:
            found.append(exc)
    found += reader.errors
    missing_sources = None
    if reader.missing and context.allow_missing_sources:
        values["sources"] = ()
        key, problem = next(iter(reader.missing.items()))
        missing_sources = f"{display_path(reader.folder)}: {key} {problem}"
    else:
        found += [_missing_error(table, key, problem) for key, problem in reader.missing.items()]
    errors += found
    if found:
        return None
    return KernelSpec(name=name, folder=reader.folder, missing_sources=missing_sources, **values)


def _name_error(shown: str, name: str) -> ManifestError | None:
    """A kernel name is its folder and module: an importable identifier."""
    if not name.isidentifier() or not name.isascii():
        return ManifestError(
            shown,
            f"the kernel name is not a Python identifier{_first_bad(name)}",
            kernel=name,
            expected="expected a name such as rmsnorm (it names the kernel's folder and module)",
        )
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        return ManifestError(
            shown,
            "the kernel name is a Python keyword",
            kernel=name,
            expected="expected a name that is not a keyword (e.g. add a suffix)",
        )
    if name in _RESERVED_NAMES:
        return ManifestError(
            shown,
            f"the kernel name shadows the package's {name}",
            kernel=name,
            expected=f"expected a name other than {', '.join(sorted(_RESERVED_NAMES))}",
        )
    return None


def _first_bad(name: str) -> str:
    """` ("$" may not be in a name)` for the first character an identifier may not hold."""
    for index, char in enumerate(name):
        if not (char.isascii() and (char.isalnum() or char == "_")) or (
            index == 0 and char.isdigit()
        ):
            shown = "a space" if char == " " else quote(char)
            return (
                f" ({shown} may not {'start' if index == 0 and char.isdigit() else 'be in'} a name)"
            )
    return ""


# --- one parser per key -------------------------------------------------------------------


def _namespace(reader: _Reader) -> str:
    table = reader.table
    ops = table.string("ops", expected="a torch.ops namespace such as llm_ops_rmsnorm")
    if ops is None:
        return f"{reader.context.package}_{table.name}"
    if not _C_IDENTIFIER_RE.fullmatch(ops):
        raise table.error(
            "ops",
            f"{quote(ops)} is not an identifier{_first_bad(ops)}",
            "expected e.g. llm_ops_rmsnorm",
        )
    return ops


def _arch(reader: _Reader) -> Mapping[str, tuple[Arch, ...]]:
    if reader.table.data.get("backend") == "cpu":
        if "arch" in reader.table.data:
            raise reader.table.error(
                "arch", "is for CUDA kernels", 'expected no arch with backend = "cpu"'
            )
        return {ANY_PLATFORM: ()}
    arch = reader.table.arch("arch") or reader.context.settings.arch
    if arch is None:
        raise reader.table.error(
            "arch", "is missing", 'expected e.g. arch = "9.0a" (or a default in [tool.kernelpack])'
        )
    return arch


def _abi(reader: _Reader) -> Abi:
    abi = reader.table.choice("abi", ("torch", "stable"))
    return cast(Abi, abi or reader.context.settings.abi or "torch")


def _backend(reader: _Reader) -> Backend:
    backend = cast(Backend, reader.table.choice("backend", ("cuda", "cpu")) or "cuda")
    if backend == "cpu":
        for key in ("ptx", "nvcc-flags"):
            if key in reader.table.data:
                raise reader.table.error(
                    key, "is for CUDA kernels", 'expected no such key with backend = "cpu"'
                )
        for entry in reader.table.strings("sources", expected="paths or globs"):
            if entry.endswith(".cu"):
                raise reader.table.error(
                    "sources",
                    f'"{entry}" is CUDA source',
                    'expected C++ sources (.cpp, .cc) with backend = "cpu"',
                )
    return backend


def _stable_target(reader: _Reader) -> Version:
    table = reader.table
    target = table.version("stable-target", example="2.10")
    if target is None:
        return _STABLE_TARGET_DEFAULT
    if target < _STABLE_TARGET_DEFAULT:
        raise table.error(
            "stable-target",
            f'"{target}" is below the oldest stable ABI target',
            f'expected "{_STABLE_TARGET_DEFAULT}" or later',
        )
    return target


def _cxx_std(reader: _Reader) -> int | None:
    value = reader.table.data.get("cxx-std")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value not in _CXX_STDS:
        expected = f"expected one of {', '.join(map(str, _CXX_STDS))}"
        raise reader.table.error("cxx-std", f"got {describe(value)}", expected)
    return value


def _depends(reader: _Reader) -> tuple[str, ...]:
    table = reader.table
    depends = table.strings("depends", expected="dependency names")
    known = sorted(reader.context.settings.dep_names)
    for dep in dict.fromkeys(depends):
        if dep not in known:
            close = difflib.get_close_matches(dep, known, n=1)
            hint = f'did you mean "{close[0]}"? ' if close else ""
            raise table.error(
                "depends",
                f'unknown dependency "{dep}"',
                f"{hint}expected one of {', '.join(known)} or a name in [tool.kernelpack.deps]",
            )
    return tuple(dict.fromkeys(depends))


def _libraries(reader: _Reader) -> tuple[str, ...]:
    table = reader.table
    libraries = table.strings("libraries", expected="library names such as cublas")
    for library in libraries:
        if not _LIBRARY_RE.fullmatch(library):
            raise table.error(
                "libraries", f'"{library}" is not a library name', "expected e.g. cublas"
            )
    return tuple(dict.fromkeys(libraries))


def _flags(key: str, expected: str) -> Callable[[_Reader], tuple[str, ...]]:
    def parse(reader: _Reader) -> tuple[str, ...]:
        flags = reader.table.strings(key, expected=expected)
        for flag in flags:
            problem = unsafe(flag, "flag")
            if problem is not None:
                raise reader.table.error(
                    key,
                    f"{quote(flag)} {problem}",
                    "expected one flag per item, with no shell characters",
                )
        return flags

    return parse


def _missing_error(table: Table, key: str, problem: str) -> ManifestError:
    what = "folders" if key == "include-dirs" else "files"
    return table.error(key, problem, f"expected existing {what}, relative to the kernel's folder")


def _sources(reader: _Reader) -> tuple[Path, ...]:
    table, folder = reader.table, reader.folder
    if "sources" not in table.data:
        raise table.error("sources", "is missing", 'expected e.g. sources = ["csrc/kernel.cu"]')
    patterns = table.strings("sources", expected="file paths or globs", allow_empty=False)
    found: dict[Path, None] = {}
    for entry in dict.fromkeys(patterns):
        _check_path(reader, "sources", entry, "glob")
        if "sources" in reader.missing:
            continue  # one absent file says it: the rest only need the checks above
        if _GLOB_CHARS.intersection(entry):
            matches = sorted(p for p in folder.glob(entry) if p.is_file())
            if not matches:
                reader.missing.setdefault("sources", f'"{entry}" matches no file')
            for match in matches:
                _check_match(reader, entry, match)
                found[_checked(reader, "sources", entry, match)] = None
            continue
        source = _checked(reader, "sources", entry, folder / entry)
        if not source.exists():
            reader.missing.setdefault("sources", f'"{entry}" does not exist')
        elif not source.is_file():
            raise table.error("sources", f'"{entry}" is not a file', "expected a source file")
        else:
            found[source] = None
    return tuple(sorted(found))


def _include_dirs(reader: _Reader) -> tuple[Path, ...]:
    dirs: dict[Path, None] = {}
    for entry in dict.fromkeys(reader.table.strings("include-dirs", expected="folders")):
        _check_path(reader, "include-dirs", entry, "path")
        if "include-dirs" in reader.missing:
            continue
        include = _checked(reader, "include-dirs", entry, reader.folder / entry)
        if not include.exists():
            reader.missing.setdefault("include-dirs", f'"{entry}" does not exist')
        elif not include.is_dir():
            raise reader.table.error(
                "include-dirs", f'"{entry}" is not a folder', "expected a folder"
            )
        dirs[include] = None
    return tuple(dirs)


def _check_path(reader: _Reader, key: str, entry: str, kind: Literal["path", "glob"]) -> None:
    """`entry` reaches nvcc's shell and build.ninja safely and stays inside the package."""
    table, context = reader.table, reader.context
    problem = unsafe(entry, kind) or path_too_long(entry)
    if problem is not None:
        raise table.error(key, f"{quote(entry)} {problem}", "expected a plain relative path")
    if Path(entry).is_absolute() or entry.startswith("~"):
        raise table.error(
            key, f'"{entry}" is an absolute path', "expected a path relative to the kernel's folder"
        )
    if not is_inside(Path(os.path.normpath(reader.folder / entry)), context.package_dir):
        raise table.error(
            key,
            f'"{entry}" points outside the package',
            f"expected a path inside {display_path(context.package_dir)}",
        )


def _check_match(reader: _Reader, entry: str, match: Path) -> None:
    """A file a glob found is a path on the command line too: its name must be safe."""
    name = match.relative_to(reader.folder).as_posix()
    problem = unsafe(name, "path") if name.isprintable() else "holds a control character"
    if problem is not None:
        raise reader.table.error(
            "sources", f"{quote(entry)} matches {quote(name)}, which {problem}", "rename the file"
        )


def _checked(reader: _Reader, key: str, entry: str, path: Path) -> Path:
    """`path` normalised; raise when it (or a symlink on the way) leaves the package."""
    normal = Path(os.path.normpath(path))
    if not os.path.lexists(normal):
        return normal  # absent: reported as missing, never read
    real = _resolve(reader.context, normal)
    if not is_inside(real, reader.context.root):
        raise reader.table.error(
            key,
            f'"{entry}" resolves outside the package (symlink to {real})',
            f"expected a path inside {display_path(reader.context.package_dir)}",
        )
    return normal


def _resolve(context: _Context, path: Path) -> Path:
    """`path.resolve()`, resolving each folder once (a kernel lists many files of one)."""
    if path.is_symlink():
        return path.resolve()
    parent = context.resolved.get(path.parent)
    if parent is None:
        parent = context.resolved[path.parent] = path.parent.resolve()
    return parent / path.name


def _defines(reader: _Reader) -> dict[str, str]:
    table = reader.table
    value = table.data.get("defines")
    if value is None:
        return {}
    expected = 'expected a table such as { BLOCK_M = "128" } (values: string, integer or boolean)'
    if not isinstance(value, dict):
        raise table.error("defines", f"got {describe(value)}", expected)
    defines: dict[str, str] = {}
    for macro, item in value.items():
        try:
            defines[macro] = _define(table, macro, item)
        except ManifestError as exc:
            reader.errors.append(exc)
    return defines


def _define(table: Table, macro: str, item: object) -> str:
    key = f"defines.{macro}"
    if not _C_IDENTIFIER_RE.fullmatch(macro):
        raise table.error(
            key, f"is not a C macro name{_first_bad(macro)}", "expected an identifier"
        )
    if isinstance(item, bool):
        return "1" if item else "0"
    if isinstance(item, int):
        if not -_MAX_DEFINE_INT <= item < _MAX_DEFINE_INT:
            raise table.error(key, f"got {describe(item)}", "expected an integer of 64 bits")
        return str(item)
    if isinstance(item, str):
        table.check_text(key, item, "a macro value")
        problem = unsafe(item, "define")
        if problem is not None:
            raise table.error(
                key, f"{quote(item)} {problem}", "expected a value with no shell characters"
            )
        return item
    raise table.error(key, f"got {describe(item)}", "expected a string, integer or boolean")


_PARSERS: Mapping[str, Callable[[_Reader], object]] = {
    "namespace": _namespace,
    "sources": _sources,
    "arch": _arch,
    "abi": _abi,
    "backend": _backend,
    "description": lambda reader: reader.table.string("description") or "",
    "include_dirs": _include_dirs,
    "cxx_std": _cxx_std,
    "stable_target": _stable_target,
    "ptx": lambda reader: bool(reader.table.boolean("ptx")),
    "min_cuda": lambda reader: reader.table.version("min-cuda", example="12.8"),
    "platforms": lambda reader: reader.table.platforms("platforms"),
    "depends": _depends,
    "nvcc_flags": _flags("nvcc-flags", "nvcc flags"),
    "cxx_flags": _flags("cxx-flags", "C++ compiler flags"),
    "defines": _defines,
    "libraries": _libraries,
}
