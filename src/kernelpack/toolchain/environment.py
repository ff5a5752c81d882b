"""The build's environment: every variable kernelpack honours, declared once, read once.

`BuildEnvironment.from_environ(environ, prefix)` reads them at planning (`plan_project`), and
the `BuildPlan` carries the value: the toolchain probe, the selection, the compile (`CC`,
`CXX`, the nvcc flag variables, the job cap, the lock timeout), the environment of the build's
child processes, the record's `selection`, the settings line and the editable install's
replayed variables all read it, never `os.environ` by name. Each field names its variables in
its metadata (an `EnvVar`); `VARIABLES` lists them all, and the table of docs/build.md is
generated from it (`python -m kernelpack.toolchain.environment --write/--check`).

The arch selection:

- `MAX_JOBS=N` caps the parallel jobs (as torch's BuildExtension reads it).
- `TORCH_CUDA_ARCH_LIST="8.0;9.0a"` (torch's spellings: `;` or spaces between entries,
  `+PTX` suffixes, `a`/`f` suffixes) names the GPUs to build for. Each kernel keeps the archs
  of its manifest whose code runs on one of them (`Arch.runs_on`): `9.0a` stays under
  `9.0`, `8.0` stays under `8.6`. The list never adds an arch (nor PTX) the manifest lacks.
- `KERNELPACK_ARCH=native` names the GPUs this machine sees (NVML, no CUDA initialisation),
  and narrows the same way; without a visible GPU it is an error.

Both narrowings apply when both are set. A kernel left with no arch is skipped as
`not-selected`, its reason naming the variable.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from packaging.version import InvalidVersion, Version

from kernelpack.errors import UsageError
from kernelpack.toolchain.launcher.farm import Farm
from kernelpack_runtime._files import write_text_atomic
from kernelpack_runtime._switch import parse_switch
from kernelpack_runtime.arch import Arch, InvalidArch
from kernelpack_runtime.device import DeviceFacts, default_probe
from kernelpack_runtime.record import SelectionRecord

__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "DOCS",
    "EDITABLE_SKIP",
    "EDITABLE_VERBOSE",
    "SOURCE_DATE_EPOCH",
    "VARIABLES",
    "ArchFilter",
    "BuildEnvironment",
    "EnvVar",
    "arch_filter",
    "dep_variable",
    "docs_text",
    "main",
    "parse_arch_list",
    "replayed",
    "source_date_epoch",
    "variables_table",
]

#: Seconds to wait for another build of the same tree (`KERNELPACK_LOCK_TIMEOUT`).
DEFAULT_LOCK_TIMEOUT = 1800.0
#: The page whose variable table `--write` regenerates, relative to the repository root.
DOCS = Path("docs/build.md")

_ENTRY_RE = re.compile(r"^(\d{1,2}\.\d[af]?)(\+PTX)?$", re.IGNORECASE)
_PREFIX = "<PREFIX>"
_NAME = "<NAME>"


@dataclass(frozen=True)
class EnvVar:
    """Environment variables that set one thing (the first one set wins, unless the field
    says otherwise), and what they do: one row of the docs table."""

    names: tuple[str, ...]
    """`<PREFIX>` stands for the package's env prefix, `<NAME>` for any name (a family)."""
    effect: str
    example: str = ""
    """A value shown with the first name in the docs (`a,b`: `<PREFIX>_KERNELS=a,b`)."""
    replayed: bool = False
    """It changes what a build produces: an editable install's rebuilds on import use the
    value it had at install time, whatever the importing shell sets."""

    def resolved(self, prefix: str) -> tuple[str, ...]:
        """The names for a package with env prefix `prefix` (families stay patterns)."""
        if not prefix:
            return tuple(name for name in self.names if _PREFIX not in name)
        return tuple(name.replace(_PREFIX, prefix) for name in self.names)

    def matches(self, name: str, prefix: str) -> bool:
        """Whether the variable `name` is one of these (a family's member included)."""
        for pattern in self.resolved(prefix):
            regex = re.escape(pattern).replace(re.escape(_NAME), "[A-Za-z0-9_]+")
            if re.fullmatch(regex, name):
                return True
        return False

    def found(self, environ: Mapping[str, str], prefix: str) -> list[tuple[str, str]]:
        """(name, value) of these variables that are set to something other than blanks,
        in the order of `names` (a family's members sorted by name)."""
        found: list[tuple[str, str]] = []
        for pattern in self.resolved(prefix):
            if _NAME in pattern:
                family = EnvVar((pattern,), self.effect)
                members = sorted(name for name in environ if family.matches(name, prefix))
            else:
                members = [pattern]
            found += [(name, environ[name]) for name in members if environ.get(name, "").strip()]
        return found

    def cell(self) -> str:
        """The names as the docs table shows them."""
        shown = [f"`{name}`" for name in self.names]
        if self.example:
            shown[0] = f"`{self.names[0]}={self.example}`"
        return ", ".join(shown)


_Found = Sequence[tuple[str, str]]


def _var(variable: EnvVar, parse: Callable[[_Found], Any], default: Any = None) -> Any:
    """A field of `BuildEnvironment` read from `variable` by `parse` (given what is set)."""
    return field(default=default, metadata={"variable": variable, "parse": parse})


def _text(found: _Found) -> str | None:
    return found[0][1].strip() if found else None


def _raw(found: _Found) -> str | None:
    return found[0][1] if found else None


def _search(found: _Found) -> str:
    return found[0][1] if found else ""


def _positive(found: _Found) -> int | None:
    if not found:
        return None
    name, value = found[0][0], found[0][1].strip()
    if not value.isdigit() or int(value) < 1:
        raise UsageError(f"{name}={value} is not a positive integer")
    return int(value)


def _arch_list(found: _Found) -> str | None:
    value = _text(found)
    if value is not None:
        parse_arch_list(value)
    return value


def _native(found: _Found) -> str | None:
    value = _text(found)
    if value is not None and value.lower() != "native":
        raise UsageError(f"KERNELPACK_ARCH={value}: expected native (or leave it unset)")
    return value


def _kernels(found: _Found) -> tuple[frozenset[str], str] | None:
    for name, value in found:
        names = frozenset(part.strip() for part in value.split(",") if part.strip())
        if names:
            return names, name
    return None


def _switch(found: _Found) -> bool:
    return any([parse_switch(value, name) for name, value in found])


def _flags(found: _Found) -> tuple[str, ...]:
    if not found:
        return ()
    name, value = found[0]
    try:
        return tuple(shlex.split(value))
    except ValueError as exc:
        raise UsageError(f"{name}={value}: {exc}") from None


def _cuda(found: _Found) -> Version | None:
    value = _text(found)
    if value is None:
        return None
    try:
        version = Version(value)
    except InvalidVersion:
        version = None
    if version is None or len(version.release) != 2 or version.local or version.pre:
        raise UsageError(f"KERNELPACK_CUDA={value}: expected a CUDA release such as 13.0 or 13.2")
    return version


def _home(found: _Found) -> tuple[str, Path] | None:
    return (found[0][0], Path(found[0][1])) if found else None


def _dirs(found: _Found) -> tuple[tuple[str, Path], ...]:
    return tuple((name, Path(value)) for name, value in found)


def _mirror(found: _Found) -> str | None:
    value = _text(found)
    if value is None:
        return None
    scheme, sep, rest = value.partition("://")
    if sep and (scheme.lower() not in ("http", "https", "file") or not rest):
        raise UsageError(
            f"{found[0][0]}={value}: expected a folder or an http(s):// or file:// URL"
        )
    return value


def _farm(found: _Found) -> Farm | None:
    # All three variables set, each once: the farm parses them together.
    return Farm.from_environ(dict(found))


def _seconds(found: _Found) -> float:
    if not found:
        return DEFAULT_LOCK_TIMEOUT
    name, value = found[0][0], found[0][1].strip()
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise UsageError(f"{name}={value} is not a number of seconds")
    return seconds


_ARCH_LIST = EnvVar(
    ("TORCH_CUDA_ARCH_LIST",),
    "build only the archs that run on these GPUs (above)",
    replayed=True,
)
_ARCH = EnvVar(
    ("KERNELPACK_ARCH",),
    "build only the archs that run on this machine's GPUs (above)",
    example="native",
    replayed=True,
)
_DEPS = EnvVar(
    ("KERNELPACK_<NAME>_DIR",),
    "the include folder of header-only dependency `<NAME>` (`KERNELPACK_CUTLASS_DIR`), "
    "instead of the project's or the built-in one",
    replayed=True,
)


@dataclass(frozen=True)
class BuildEnvironment:
    """What the environment asks of a build, read once (`from_environ`): one field per
    variable (or per variables that set one thing), which its metadata names (`EnvVar`)."""

    kernels: tuple[frozenset[str], str] | None = _var(
        EnvVar(
            (f"{_PREFIX}_KERNELS", "KERNELPACK_KERNELS"),
            "build only these kernels (`PREFIX`: the package name upper-cased, "
            "or `[tool.kernelpack] env-prefix`)",
            example="a,b",
            replayed=True,
        ),
        _kernels,
    )
    """The kernels asked for and the variable that named them; None: every kernel."""
    require: bool = _var(
        EnvVar(
            (f"{_PREFIX}_KERNELS_REQUIRE", "KERNELPACK_REQUIRE"),
            "every skip is an error",
            example="1",
            replayed=True,
        ),
        _switch,
        False,
    )
    jobs: int | None = _var(
        EnvVar(
            ("KERNELPACK_JOBS",),
            "parallel jobs (default: the cores; the pools bound compiles by free memory)",
        ),
        _positive,
    )
    max_jobs: int | None = _var(EnvVar(("MAX_JOBS",), "caps the parallel jobs"), _positive)
    torch_cuda_arch_list: str | None = _var(
        EnvVar(
            ("TORCH_CUDA_ARCH_LIST",),
            "build only the archs that run on these GPUs (above)",
            replayed=True,
        ),
        _arch_list,
    )
    """As set (checked); what it selects is `arch_filter`'s."""
    kernelpack_arch: str | None = _var(
        EnvVar(
            ("KERNELPACK_ARCH",),
            "build only the archs that run on this machine's GPUs (above)",
            example="native",
            replayed=True,
        ),
        _native,
    )
    """`native` as set (any case), or None."""
    launcher: str | None = _var(
        EnvVar(
            ("KERNELPACK_LAUNCHER",),
            "`auto` (default: sccache with a remote sccache backend or farm, else ccache, else "
            "sccache, when on PATH), `sccache`, `ccache`, a path, or `none`",
        ),
        _text,
    )
    lock_timeout: float = _var(
        EnvVar(
            ("KERNELPACK_LOCK_TIMEOUT",),
            "seconds to wait for another build of the same tree (default 1800)",
        ),
        _seconds,
        DEFAULT_LOCK_TIMEOUT,
    )
    cuda_home: tuple[str, Path] | None = _var(
        EnvVar(
            ("CUDA_HOME", "CUDA_PATH"),
            "the CUDA toolkit (else the one owning the `nvcc` on PATH)",
            replayed=True,
        ),
        _home,
    )
    """The variable that named the toolkit, and its folder."""
    cuda: Version | None = _var(  # noqa: RUF009 - a frozen dataclass (ruff cannot see it)
        EnvVar(
            ("KERNELPACK_CUDA",),
            "the CUDA release of the toolkit (default: torch's): a system toolkit of another "
            "release is passed over for the CUDA wheels of this one (docs: Toolchains)",
            example="13.2",
            replayed=True,
        ),
        _cuda,
    )
    """`KERNELPACK_CUDA` as a release (`Version("13.2")`), None when unset."""
    cxx: str | None = _var(
        EnvVar(("CXX",), "the host C++ compiler (default `c++`)", replayed=True), _raw
    )
    cc: str | None = _var(
        EnvVar(("CC",), "the host C compiler (default `cc`)", replayed=True), _raw
    )
    nvcc_prepend_flags: tuple[str, ...] = _var(
        EnvVar(
            ("NVCC_PREPEND_FLAGS",),
            "nvcc flags before the build's own, written into `build.ninja` (so the compiler "
            "cache sees them; nvcc does not read them a second time)",
            replayed=True,
        ),
        _flags,
        (),
    )
    nvcc_append_flags: tuple[str, ...] = _var(
        EnvVar(
            ("NVCC_APPEND_FLAGS",),
            "nvcc flags after the build's own, written into `build.ninja` as above",
            replayed=True,
        ),
        _flags,
        (),
    )
    path: str = _var(
        EnvVar(("PATH",), "where `nvcc`, `sccache` and `ccache` are looked up"), _search, ""
    )
    farm: Farm | None = _var(  # noqa: RUF009 - a frozen dataclass (ruff cannot see it)
        EnvVar(
            ("KERNELPACK_DIST_SCHEDULER", "KERNELPACK_DIST_TOKEN", "KERNELPACK_DIST_TOKEN_FILE"),
            "an sccache-dist farm to compile on: its scheduler's URL, and its client token or "
            "a file holding it (above; `[tool.kernelpack] dist-scheduler`, `dist-token-file`)",
        ),
        _farm,
    )
    """Checked when the build is planned; the launcher's session sends the compiles there."""
    dep_dirs: tuple[tuple[str, Path], ...] = _var(
        EnvVar(
            (f"KERNELPACK_{_NAME}_DIR",),
            "the include folder of the header-only dependency `<NAME>` "
            "(`KERNELPACK_CUTLASS_DIR`), instead of the project's or the built-in one",
            replayed=True,
        ),
        _dirs,
        (),
    )
    """(`KERNELPACK_<NAME>_DIR`, its folder) of each set (`dep_variable` names a dependency's)."""
    deps_mirror: str | None = _var(
        EnvVar(
            ("KERNELPACK_DEPS_MIRROR",),
            "a folder or http(s) URL holding the archives of pinned dependencies "
            "(`cutlass-4.0.0.tar.gz`, `nvidia_cutlass-3.8.0.0-py3-none-any.whl`), looked up "
            "instead of GitHub and PyPI; each is checked against kernelpack's sha256 table",
        ),
        _mirror,
    )
    """As set: a folder, or an `http://`, `https://` or `file://` URL."""
    allow_nearest: bool = _var(
        EnvVar(
            ("KERNELPACK_ALLOW_NEAREST",),
            "a pinned dependency (`cutlass_4_0`) that is not available here may use the "
            "nearest available version, with a warning (`--allow-nearest`)",
            example="1",
            replayed=True,
        ),
        _switch,
        False,
    )
    prefix: str = ""
    """The package's env prefix the variables were read with (`<PREFIX>`)."""
    inherited: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType({}), compare=False, repr=False
    )
    """The whole environment as read: what the toolchain's probes run in and, less what
    `child_environ` drops, what the build's processes inherit."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], prefix: str = "") -> BuildEnvironment:
        """Read every declared variable of `environ` for a package with env prefix `prefix`
        (empty: the package's own variables are not read). A value that does not parse is a
        one-line `UsageError` naming the variable."""
        values: dict[str, Any] = {}
        for item in dataclasses.fields(cls):
            if "variable" in item.metadata:
                found = item.metadata["variable"].found(environ, prefix)
                values[item.name] = item.metadata["parse"](found)
        return cls(**values, prefix=prefix, inherited=MappingProxyType(dict(environ)))

    def child_environ(self) -> dict[str, str]:
        """The environment of ninja and the compiles: the inherited one, less `MAKEFLAGS`
        (ninja runs its own jobs) and the nvcc flag variables, which nvcc would otherwise
        apply a second time, behind the compiler cache's back (`build.ninja` has them)."""
        dropped = {"MAKEFLAGS", *_variable("nvcc_prepend_flags"), *_variable("nvcc_append_flags")}
        return {name: value for name, value in self.inherited.items() if name not in dropped}

    def recorded(self, native: tuple[str, ...] = ()) -> SelectionRecord | None:
        """The record's `selection`: `MAX_JOBS`, `TORCH_CUDA_ARCH_LIST` and `KERNELPACK_ARCH`
        as the build saw them, and the capabilities `native` found; None when none is set."""
        shown = (self.max_jobs, self.torch_cuda_arch_list, self.kernelpack_arch)
        if all(value is None for value in shown):
            return None
        return SelectionRecord(
            max_jobs=self.max_jobs,
            torch_cuda_arch_list=self.torch_cuda_arch_list,
            kernelpack_arch=self.kernelpack_arch,
            native=native,
        )

    def fingerprint(self) -> dict[str, str | None]:
        """The replayed variables (`EnvVar.replayed`) as read, None for one that is unset (of
        a family, the members that are set): what an editable install records."""
        recorded: dict[str, str | None] = {}
        for variable in VARIABLES:
            if variable.replayed:
                recorded.update((name, None) for name in variable.resolved(self.prefix))
                recorded.update(variable.found(self.inherited, self.prefix))
        return {name: value for name, value in sorted(recorded.items()) if _NAME not in name}


def _variable(name: str) -> tuple[str, ...]:
    """The variable names of the `BuildEnvironment` field `name`."""
    item = next(f for f in dataclasses.fields(BuildEnvironment) if f.name == name)
    variable: EnvVar = item.metadata["variable"]
    return variable.names


#: Read by the import hook of an editable install at interpreter start-up (standard library
#: only, so by name in `kernelpack.backend._editable_hook`); they do not change a build.
EDITABLE_SKIP = EnvVar(
    ("KERNELPACK_EDITABLE_SKIP",),
    "editable installs: no rebuild on import for these project roots (`os.pathsep`-separated)",
)
EDITABLE_VERBOSE = EnvVar(
    ("KERNELPACK_EDITABLE_VERBOSE",), "editable installs: show the rebuild's output", example="1"
)
#: Read when a wheel or sdist is written (not a build input: `source_date_epoch`).
SOURCE_DATE_EPOCH = EnvVar(
    ("SOURCE_DATE_EPOCH",),
    "the time stamp of every file in wheels and sdists (reproducible archives)",
)
#: Not kernelpack's: read by the toolchain's own tools or probes, listed for completeness.
_OTHERS = (
    EnvVar(
        ("XDG_CACHE_HOME",),
        "where the machine's cache of torch facts lives (default `~/.cache`)",
    ),
    EnvVar(("CCACHE_DIR", "CCACHE_*"), "passed through to ccache"),
    EnvVar(
        ("SCCACHE_*",),
        "configure sccache's server for the build (backend, read-only mode); "
        "`SCCACHE_SERVER_PORT` is kernelpack's",
    ),
)

#: Every variable kernelpack's build honours, in the order of the docs table.
VARIABLES: tuple[EnvVar, ...] = (
    *(item.metadata["variable"] for item in dataclasses.fields(BuildEnvironment) if item.metadata),
    EDITABLE_SKIP,
    EDITABLE_VERBOSE,
    SOURCE_DATE_EPOCH,
    *_OTHERS,
)


def replayed(name: str, prefix: str) -> bool:
    """Whether the variable `name` is a replayed one (`EnvVar.replayed`) for a package with
    env prefix `prefix`."""
    return any(v.replayed and v.matches(name, prefix) for v in VARIABLES)


def dep_variable(name: str) -> str:
    """The variable naming dependency `name`'s folder: `KERNELPACK_CUTLASS_DIR`."""
    return "KERNELPACK_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper() + "_DIR"


def source_date_epoch(environ: Mapping[str, str]) -> int | None:
    """`SOURCE_DATE_EPOCH` as an integer; None when unset; `UsageError` when not a number."""
    found = SOURCE_DATE_EPOCH.found(environ, "")
    if not found:
        return None
    name, value = found[0][0], found[0][1].strip()
    if not value.isdigit():
        raise UsageError(f"{name}={value!r}: expected seconds since 1970 (digits)")
    return int(value)


@dataclass(frozen=True)
class ArchFilter:
    """GPUs to build for: a kernel keeps the archs whose code runs on one of them."""

    capabilities: frozenset[tuple[int, int]]
    origin: str
    """What asked for it, for messages: `TORCH_CUDA_ARCH_LIST=9.0` or
    `KERNELPACK_ARCH=native (NVIDIA H200, sm_90)`."""
    native: bool = False
    """The GPUs are this machine's (`KERNELPACK_ARCH=native`)."""
    narrower: ArchFilter | None = None
    """A second filter applied after this one (both variables set)."""

    def narrow(self, archs: Sequence[Arch]) -> tuple[Arch, ...]:
        """The archs of `archs` whose code runs on one of the GPUs (of every filter)."""
        kept = tuple(a for a in archs if any(a.runs_on(c) for c in self.capabilities))
        return self.narrower.narrow(kept) if self.narrower is not None else kept

    def describe(self) -> str:
        """`TORCH_CUDA_ARCH_LIST=9.0` (and the second filter's origin, joined by " and ")."""
        if self.narrower is None:
            return self.origin
        return f"{self.origin} and {self.narrower.describe()}"


def parse_arch_list(value: str, name: str = "TORCH_CUDA_ARCH_LIST") -> frozenset[tuple[int, int]]:
    """The compute capabilities of a `TORCH_CUDA_ARCH_LIST` value ("9.0a;10.0", "8.0 9.0+PTX").

    An entry that is not an arch is a `UsageError` quoting it.
    """
    capabilities: set[tuple[int, int]] = set()
    for entry in value.replace(",", ";").replace(" ", ";").split(";"):
        entry = entry.strip()
        if not entry:
            continue
        match = _ENTRY_RE.match(entry)
        try:
            if match is None:
                raise InvalidArch(f'"{entry}" is not a CUDA arch such as 9.0, 9.0a or 9.0+PTX')
            arch = Arch.parse(match.group(1).lower())
        except InvalidArch as exc:
            raise UsageError(f"{name}={value}: {exc}") from None
        capabilities.add(arch.capability)
    if not capabilities:
        raise UsageError(f"{name}={value!r} names no arch; expected e.g. 9.0 or 9.0a;10.0")
    return frozenset(capabilities)


def _native_filter(probe: Callable[[], DeviceFacts]) -> ArchFilter:
    facts = probe()
    if not facts.devices:
        raise UsageError(
            "KERNELPACK_ARCH=native needs a visible GPU, but there is "
            f"{facts.describe()}; unset it or name the archs in TORCH_CUDA_ARCH_LIST"
        )
    shown = ", ".join(f"{d.name}, {d.sm}" for d in facts.devices)
    return ArchFilter(
        capabilities=frozenset(d.capability for d in facts.devices),
        origin=f"KERNELPACK_ARCH=native ({shown})",
        native=True,
    )


def arch_filter(
    environment: BuildEnvironment, probe: Callable[[], DeviceFacts] | None = None
) -> ArchFilter | None:
    """The filter `TORCH_CUDA_ARCH_LIST` and `KERNELPACK_ARCH` ask for; None when neither
    is set. `probe` (default: NVML) is asked only for `KERNELPACK_ARCH=native`."""
    found: list[ArchFilter] = []
    listed = environment.torch_cuda_arch_list
    if listed is not None:
        found.append(ArchFilter(parse_arch_list(listed), f"TORCH_CUDA_ARCH_LIST={listed}"))
    if environment.kernelpack_arch is not None:
        found.append(_native_filter(probe or default_probe))
    if not found:
        return None
    if len(found) == 1:
        return found[0]
    first, second = found
    return ArchFilter(first.capabilities, first.origin, native=first.native, narrower=second)


_GENERATED = "(generated by python -m kernelpack.toolchain.environment --write)"


def variables_table() -> str:
    """The Markdown table of `VARIABLES`: variable, effect, and whether an editable install
    replays it (`EnvVar.replayed`)."""
    rows = ["| variable | effect | editable rebuilds |", "| --- | --- | --- |"]
    rows += [
        f"| {v.cell()} | {v.effect} | {'as installed' if v.replayed else 'as set'} |"
        for v in VARIABLES
    ]
    return "\n".join(rows)


def docs_text(current: str) -> str:
    """`current` (docs/build.md) with the variable table between its markers regenerated."""
    begin, end = f"<!-- variables:begin {_GENERATED} -->", "<!-- variables:end -->"
    start, stop = current.find(begin), current.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"{DOCS}: the markers {begin!r} … {end!r} are missing")
    return current[: start + len(begin)] + "\n" + variables_table() + "\n" + current[stop:]


def main(argv: Sequence[str] | None = None) -> int:
    """Write (or `--check`) the variable table of docs/build.md in the repository at ROOT."""
    parser = argparse.ArgumentParser(
        prog="python -m kernelpack.toolchain.environment",
        description="Regenerate the environment-variable table of docs/build.md.",
    )
    parser.add_argument("root", nargs="?", type=Path, default=Path.cwd(), metavar="ROOT")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="rewrite the table")
    action.add_argument("--check", action="store_true", help="exit 1 when it drifted")
    args = parser.parse_args(argv)
    path = args.root / DOCS
    current = path.read_text(encoding="utf-8")
    wanted = docs_text(current)
    if wanted == current:
        return 0
    if args.check:
        print(f"{path}: out of date; run {parser.prog} --write", file=sys.stderr)
        return 1
    write_text_atomic(path, wanted)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
