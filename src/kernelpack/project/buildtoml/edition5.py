"""`build.toml` edition 5: the current format (`[general] edition = 5`).

Its tables: `[general]` (name, version, edition, license, backends required), the backend
tables `[general.cuda]` (CUDA range, kernel and Python dependencies), `[general.neuron]`,
`[general.tpu]`, `[general.xpu]`, `[general.hub]`; one framework, `[torch]` (whose
`stable-abi` is one target or a per-backend table) or `[torch-noarch]`; `[kernel.<name>]`.
"""

from __future__ import annotations

from kernelpack.project.buildtoml._tables import Tables
from kernelpack.project.buildtoml.model import Project

__all__ = ["EDITION", "read"]

EDITION = 5

_GENERAL = (
    "name",
    "version",
    "edition",
    "license",
    "upstream",
    "source",
    "backends",
    "cuda",
    "hub",
    "kernel-depends",
    "neuron",
    "python-depends",
    "tpu",
    "xpu",
)
_DEPENDS = ("kernel-depends", "python-depends")
_TORCH = ("include", "minver", "maxver", "pyext", "src", "stable-abi", "cxx-flags")
_NOARCH = ("pyext", "cuda-capabilities", "rocm-archs")
_TOP = ("general", "kernel", "torch", "torch-noarch", "tvm-ffi")


def read(tables: Tables) -> Project:
    """An edition-5 file as the project model."""
    top = tables.top(_TOP)
    general = tables.required_table(top, "general", _GENERAL)
    cuda = tables.sub_table(general, "cuda", ("minver", "maxver", *_DEPENDS))
    for backend in ("neuron", "xpu"):
        tables.sub_table(general, backend, _DEPENDS)
    tables.sub_table(general, "tpu", ("python-depends",))
    tables.hub(general)
    general.strings("kernel-depends", expected="kernel dependencies")
    framework = tables.framework(top, _TORCH, _NOARCH, stable_abi="either")
    return tables.project(
        top,
        general,
        cuda,
        framework,
        format="edition 5",
        required=True,
        urls=("upstream", "source"),
    )
