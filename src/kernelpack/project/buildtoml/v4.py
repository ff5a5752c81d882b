"""`build.toml` v4: the format before editions (no `edition` key).

kernel-builder reads it by upgrading it to edition 5 in memory, with one warning; kernelpack
does the same (`formats`). It differs from edition 5 in: no `edition`; `[torch] stable-abi`
is one target for every backend (no per-backend table); no `kernel-depends`, no
`[general.tpu]`; `license` and `version` are required, as is one framework table.
"""

from __future__ import annotations

from kernelpack.project.buildtoml._tables import Tables
from kernelpack.project.buildtoml.model import Project

__all__ = ["read"]

_GENERAL = (
    "name",
    "version",
    "license",
    "upstream",
    "source",
    "backends",
    "cuda",
    "hub",
    "neuron",
    "python-depends",
    "xpu",
)
_TORCH = ("include", "minver", "maxver", "pyext", "src", "stable-abi", "cxx-flags")
_NOARCH = ("pyext", "cuda-capabilities", "rocm-archs")
_TOP = ("general", "kernel", "torch", "torch-noarch", "tvm-ffi")


def read(tables: Tables) -> Project:
    """A v4 file as the project model (what edition 5 would say)."""
    top = tables.top(_TOP)
    general = tables.required_table(top, "general", _GENERAL)
    cuda = tables.sub_table(general, "cuda", ("minver", "maxver", "python-depends"))
    for backend in ("neuron", "xpu"):
        tables.sub_table(general, backend, ("python-depends",))
    tables.hub(general)
    framework = tables.framework(top, _TORCH, _NOARCH, stable_abi="version")
    return tables.project(
        top, general, cuda, framework, format="v4", required=True, urls=("upstream", "source")
    )
