"""Which format a `build.toml` is written in, and the policy for the older ones.

As kernel-builder's `compat.rs` and `parse.rs`: `[general] edition = 5` is edition 5, any
other edition is refused; a file without an edition is v4 when it has what v4 requires
(`license`, `version`, one framework table), else v3 — every file v4 refuses, v3 refuses too,
so this is kernel-builder's "try v4, then v3" — and the `universal` format (v2) when
`[general]` has `universal` or no `backends`. An older format is read by upgrading it to
edition 5 in memory, with one note (kernel-builder warns for v4 and refuses v3; kernelpack
reads v3 and v2 too). `kernelpack migrate` writes the current format.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from kernelpack.errors import ManifestError
from kernelpack.project._toml import Table, describe, display_path, read_toml
from kernelpack.project.buildtoml import edition5, v2, v3, v4
from kernelpack.project.buildtoml._tables import Tables
from kernelpack.project.buildtoml.model import Project

__all__ = ["read"]

_FRAMEWORKS = ("torch", "torch-noarch", "tvm-ffi")


def read(path: Path) -> Project:
    """Parse `path` with the reader of its format; raise `ManifestError` (one line)."""
    path = Path(path).absolute()
    data = read_toml(path)
    tables = Tables(path, data)
    general = data.get("general")
    if not isinstance(general, dict):
        raise ManifestError(
            tables.shown,
            "has no [general] table" if general is None else f"[general] is {describe(general)}",
            expected="expected [general] with name, version, license and backends",
        )
    edition = general.get("edition")
    if edition is not None:
        if edition != edition5.EDITION:
            raise Table(tables.shown, "general", general).error(
                "edition",
                f"got {describe(edition)}",
                f"expected edition = {edition5.EDITION} (a newer edition needs a newer kernelpack)",
            )
        return edition5.read(tables)
    if v2.looks_like(data):
        return _upgraded(v2.read(tables))
    if _has_v4_requirements(general, data):
        return _upgraded(v4.read(tables))
    return _upgraded(v3.read(tables))


def _has_v4_requirements(general: dict[str, Any], data: dict[str, Any]) -> bool:
    return (
        "license" in general and "version" in general and any(name in data for name in _FRAMEWORKS)
    )


def _upgraded(project: Project) -> Project:
    note = (
        f"{display_path(project.path)}: build.toml is in the {project.format} format, read as "
        "edition 5 (`kernelpack migrate` writes kernels.toml; `kernel-builder update-build` "
        "writes edition 5)"
    )
    return replace(project, note=note)
