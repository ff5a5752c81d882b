"""`build.toml`: a Hugging Face kernel-builder project, read as a kernelpack `Manifest`.

Every format kernel-builder has read is read by a small reader of its own (`edition5`, `v4`,
`v3`, `v2`) into the one project model (`model`); `formats` picks the reader and says, in one
note, when an older format was upgraded in memory; `translate` makes the kernelpack manifest
from the model; `capabilities` holds kernel-builder's CUDA capability rules; `generated` the
files kernel-builder generates (`_ops.py`, `registration.h`).
"""

from __future__ import annotations

from pathlib import Path

from kernelpack.project.buildtoml.formats import read
from kernelpack.project.buildtoml.generated import ops_py, registration_h
from kernelpack.project.buildtoml.model import Project, namespace
from kernelpack.project.buildtoml.translate import (
    CPU_KERNEL,
    DEPENDS,
    KERNEL,
    manifest,
    requirements,
)
from kernelpack.project.manifest import Manifest
from kernelpack.project.settings import Settings

__all__ = [
    "BUILD_TOML",
    "CPU_KERNEL",
    "DEPENDS",
    "KERNEL",
    "Project",
    "load",
    "namespace",
    "ops_py",
    "read",
    "registration_h",
    "requirements",
]

#: The file name kernel-builder reads.
BUILD_TOML = "build.toml"


def load(
    path: Path,
    *,
    settings: Settings | None = None,
    allow_missing_sources: bool = False,
) -> Manifest:
    """Parse `path` (a `build.toml` of any format) into a `Manifest`; raise `ManifestError`.

    Every table and key is checked (unknown keys are errors); the sources must exist (with
    `allow_missing_sources` the library is skipped as `sources-missing` instead); `settings`
    (a `[tool.kernelpack]` next to it) add `depends` names and a default arch.
    """
    return manifest(read(path), settings or Settings(), allow_missing_sources=allow_missing_sources)
