"""Pins: `[tool.uv.sources]` entries for built wheels, and checking pins against `uv.lock`.

A kernel wheel imports only under the torch its version names (`+cu130torch2.11.0`), or any
torch from a floor up (`+cu130stable2.10`). uv installs a pinned wheel URL whatever torch the
lock holds, so a pin whose torch no longer matches the lock fails at import, not at install:
`check` finds that before a user does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from packaging.tags import Tag
from packaging.utils import (
    InvalidWheelFilename,
    NormalizedName,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from kernelpack.abitag import AbiTag
from kernelpack.errors import UsageError
from kernelpack.project._toml import PLATFORMS, display_path, read_toml
from kernelpack.syntax import toml

__all__ = [
    "BACKEND",
    "IMPORT_FAILS",
    "Pin",
    "PinCheck",
    "Wheel",
    "check_pins",
    "locked_torch",
    "pins",
    "render_sources",
]

#: Why a mismatch matters, said once per mismatch line.
IMPORT_FAILS = "a pin whose torch no longer matches the lock fails at import, not at install"

#: The build backend of a kernelpack project (a path source pointing at one needs nvcc).
BACKEND = "kernelpack.backend"

# Platform tag prefixes of Linux wheels: the rest of the tag is the machine.
_LINUX_PREFIXES = ("linux_", "manylinux", "musllinux")


@dataclass(frozen=True)
class Wheel:
    """What a wheel's file name says: distribution, version, python and machines."""

    filename: str
    name: NormalizedName
    version: Version
    tags: frozenset[Tag]

    @classmethod
    def parse(cls, filename: str) -> Wheel:
        """Parse a wheel file name (or path, or URL); `UsageError` when it is not one."""
        base = unquote(urlsplit(filename).path).rsplit("/", 1)[-1]
        try:
            name, version, _build, tags = parse_wheel_filename(base)
        except (InvalidWheelFilename, InvalidVersion) as exc:
            raise UsageError(f"{filename}: not a wheel file name ({exc})") from None
        return cls(filename=base, name=name, version=version, tags=tags)

    @property
    def abi(self) -> AbiTag | None:
        """The kernelpack ABI tag of the version, None for a wheel that carries none."""
        return AbiTag.of_version(self.version)

    @property
    def machines(self) -> tuple[str, ...]:
        """`platform_machine` values the wheel installs on (`x86_64`, `aarch64`)."""
        found = {_machine(tag.platform, self.filename) for tag in self.tags}
        return tuple(sorted(found))

    @property
    def pythons(self) -> tuple[str, ...]:
        """`python_version` values for a per-interpreter wheel (`cp312-cp312`); () for abi3
        and pure wheels, which install on every python the project allows."""
        versions = set()
        for tag in self.tags:
            if tag.abi in ("abi3", "none") or not tag.interpreter.startswith("cp"):
                return ()
            digits = tag.interpreter[2:]
            versions.add(f"{digits[0]}.{digits[1:]}")
        return tuple(sorted(versions, key=lambda v: Version(v)))


def _machine(platform: str, filename: str) -> str:
    if platform.startswith(_LINUX_PREFIXES):
        # linux_x86_64, manylinux_2_28_aarch64, manylinux2014_x86_64: the machine follows
        # the prefix and its glibc/musl version fields, which are all digits.
        parts = platform.split("_")
        rest = parts[1:]
        while rest and (rest[0].isdigit() or rest[0] == ""):
            rest = rest[1:]
        if rest:
            return "_".join(rest)
    raise UsageError(f"{filename}: platform tag {platform!r} is not a Linux machine")


@dataclass(frozen=True)
class Pin:
    """One `[tool.uv.sources]` entry: a URL and the marker that selects it."""

    package: NormalizedName
    url: str
    marker: str
    wheel: str

    def to_json(self) -> dict[str, str]:
        return {
            "package": self.package,
            "url": self.url,
            "marker": self.marker,
            "wheel": self.wheel,
        }


def pins(wheels: Iterable[Wheel], url_base: str) -> list[Pin]:
    """One pin per wheel and machine, with markers that are pairwise disjoint, ordered by
    package, machine (x86_64 first) and python.

    Every marker starts `platform_machine == '<m>'`. A wheel built for one interpreter
    (`cp312-cp312`) adds `and python_version == '3.12'`. An abi3 (or pure) wheel serves the
    other Pythons: it adds `python_version != 'X.Y'` for each per-interpreter wheel of its
    package and machine in its range and, beside an abi3 wheel with a higher floor (`cp310-abi3` and
    `cp312-abi3`), the range below that floor (`python_version < '3.12'`; the higher one gets
    `python_version >= '3.12'`). uv requires the markers of one package's sources to be
    disjoint. Two wheels claiming the same package, machine and python are a `UsageError`
    (uv would pick one of them silently).
    """
    base = url_base.rstrip("/")
    slots: dict[tuple[str, str], dict[str, Wheel]] = {}
    for wheel in wheels:
        for machine in wheel.machines:
            group = slots.setdefault((wheel.name, machine), {})
            for python in wheel.pythons or (_SERVES_FROM + _floor(wheel),):
                other = group.get(python)
                if other is not None and other.filename != wheel.filename:
                    marker = f"platform_machine == '{machine}'"
                    if not python.startswith(_SERVES_FROM):
                        marker += f" and python_version == '{python}'"
                    raise UsageError(
                        f"{wheel.filename} and {other.filename} are both for {marker}; "
                        "pass one wheel per package and platform"
                    )
                group[python] = wheel
    found: list[tuple[tuple[str, int, str, int, Version], Pin]] = []
    for (name, machine), group in slots.items():
        known = PLATFORMS.index(machine) if machine in PLATFORMS else len(PLATFORMS)
        exact = sorted((p for p in group if not p.startswith(_SERVES_FROM)), key=Version)
        floors = sorted(
            (p.removeprefix(_SERVES_FROM) for p in group if p.startswith(_SERVES_FROM)),
            key=lambda floor: Version(floor or "0"),
        )
        for index, floor in enumerate(floors):
            clauses = [f"platform_machine == '{machine}'"]
            if index > 0:
                clauses.append(f"python_version >= '{floor}'")
            if index + 1 < len(floors):
                clauses.append(f"python_version < '{floors[index + 1]}'")
            clauses += [
                f"python_version != '{python}'"
                for python in exact
                if Version(python) >= Version(floor or "0")
                and (index + 1 == len(floors) or Version(python) < Version(floors[index + 1]))
            ]
            wheel = group[_SERVES_FROM + floor]
            order = (name, known, machine, 0, Version(floor or "0"))
            found.append((order, _pin(wheel, " and ".join(clauses), base)))
        for python in exact:
            marker = f"platform_machine == '{machine}' and python_version == '{python}'"
            order = (name, known, machine, 1, Version(python))
            found.append((order, _pin(group[python], marker, base)))
    return [pin for _, pin in sorted(found, key=lambda item: item[0])]


# Slot of a wheel that serves every Python from its floor up (abi3 or pure): this prefix and
# the floor ("" for none).
_SERVES_FROM = "from:"


def _floor(wheel: Wheel) -> str:
    """`3.10` for a `cp310-abi3` wheel; "" for a pure (`py3-none`) one."""
    floors = [
        f"{tag.interpreter[2]}.{tag.interpreter[3:]}"
        for tag in wheel.tags
        if tag.interpreter.startswith("cp") and len(tag.interpreter) > 3
    ]
    return min(floors, key=Version) if floors else ""


def _pin(wheel: Wheel, marker: str, base: str) -> Pin:
    return Pin(wheel.name, f"{base}/{wheel.filename}", marker, wheel.filename)


def render_sources(entries: Sequence[Pin]) -> str:
    """The `[tool.uv.sources]` table, ready to paste into `pyproject.toml`."""
    lines = ["[tool.uv.sources]"]
    by_package: dict[str, list[Pin]] = {}
    for pin in entries:
        by_package.setdefault(pin.package, []).append(pin)
    for package, group in by_package.items():
        lines.append(f"{toml.key(package)} = [")
        lines += [
            f"    {{ url = {toml.string(pin.url)}, marker = {toml.string(pin.marker)} }},"
            for pin in group
        ]
        lines.append("]")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class PinCheck:
    """One source of a kernel package and what is wrong with it (None: nothing)."""

    package: str
    source: str
    """The pinned URL, or the path of a path source."""
    abi: AbiTag | None
    """The pinned wheel's ABI tag; None for a path source."""
    problem: str | None

    @property
    def ok(self) -> bool:
        return self.problem is None

    def to_json(self) -> dict[str, Any]:
        return {
            "package": self.package,
            "source": self.source,
            "abi": None if self.abi is None else str(self.abi),
            "ok": self.ok,
            "problem": self.problem,
        }


def locked_torch(lock: Path) -> list[Version]:
    """Every distinct torch version `uv.lock` resolves (one per fork), lowest first."""
    data = read_toml(lock)
    versions = set()
    packages = data.get("package", [])
    if not isinstance(packages, list):
        raise UsageError(f"{display_path(lock)}: package is not an array of tables")
    for package in packages:
        if isinstance(package, Mapping) and package.get("name") == "torch":
            try:
                versions.add(Version(str(package.get("version"))))
            except InvalidVersion:
                raise UsageError(
                    f"{display_path(lock)}: torch version {package.get('version')!r} "
                    "is not a version"
                ) from None
    if not versions:
        raise UsageError(f"{display_path(lock)}: no torch package in the lock")
    return sorted(versions)


def _sources(pyproject: Path) -> list[tuple[str, Mapping[str, Any]]]:
    data = read_toml(pyproject)
    sources: object = data
    keys: list[str] = []
    for key in ("tool", "uv", "sources"):
        assert isinstance(sources, Mapping)
        sources = sources.get(key, {})
        keys.append(key)
        if not isinstance(sources, Mapping):
            table = ".".join(keys)
            raise UsageError(f"{display_path(pyproject)}: [{table}] is not a table")
    assert isinstance(sources, Mapping)
    found = []
    for package, value in sources.items():
        entries = value if isinstance(value, list) else [value]
        found += [(str(package), entry) for entry in entries if isinstance(entry, Mapping)]
    return found


def check_pins(pyproject: Path, lock: Path) -> tuple[list[Version], list[PinCheck]]:
    """The locked torch versions and a check of every kernel package source.

    A pinned kernel wheel is a URL source whose wheel version carries a kernelpack ABI tag:
    a `torch` tag must equal every locked torch, a `stable` tag must not exceed any of them,
    and the CUDA major must match a locked torch that names one (`2.11.0+cu130`). A path
    source holding a kernelpack project is always a problem: uv cannot read a source tree's
    metadata without building it, so every `uv lock` would need nvcc. Other sources are not
    kernelpack's business.
    """
    torches = locked_torch(lock)
    checks = []
    for package, entry in _sources(pyproject):
        url, path = entry.get("url"), entry.get("path")
        if isinstance(url, str) and urlsplit(url).path.endswith(".whl"):
            wheel = Wheel.parse(url)
            abi = wheel.abi
            if abi is not None:
                checks.append(PinCheck(package, url, abi, _problem(wheel, abi, torches)))
        elif isinstance(path, str) and _is_kernel_project(pyproject.parent / path):
            problem = (
                f"path source {path} is a kernelpack source tree: uv cannot read its metadata "
                "without building it, so every uv lock would need nvcc; pin its release wheels "
                "(kernelpack pin)"
            )
            checks.append(PinCheck(package, path, None, problem))
    return torches, checks


def _is_kernel_project(folder: Path) -> bool:
    pyproject = folder / "pyproject.toml"
    if not pyproject.is_file():
        return False
    system = read_toml(pyproject).get("build-system", {})
    return isinstance(system, Mapping) and system.get("build-backend") == BACKEND


def _problem(wheel: Wheel, abi: AbiTag, torches: Sequence[Version]) -> str | None:
    for torch in torches:
        if not abi.accepts(torch):
            wants = f"torch {abi.torch}" if abi.kind == "torch" else f"torch >= {abi.torch}"
            return f"{wheel.filename} needs {wants}, uv.lock has torch {torch}: {IMPORT_FAILS}"
        locked_cuda = AbiTag.cuda_of(torch)
        if locked_cuda is not None and abi.cuda_major not in (None, locked_cuda):
            return (
                f"{wheel.filename} is built for CUDA {abi.cuda_major}, uv.lock has torch "
                f"{torch} (CUDA {locked_cuda}): {IMPORT_FAILS}"
            )
    return None
