"""`build.toml` v3: the format before v4 (no `edition`; kernel-builder now refuses it).

kernelpack reads it by upgrading it in memory with one note, as it does v4. It differs from
v4 in: `license` and `version` are optional (version 1 by default); no `source`; `[torch]`
has no `stable-abi` and no `cxx-flags`; there is no `[torch-noarch]`: a file without a
framework table is a Python-only (noarch) project.
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
    "backends",
    "cuda",
    "hub",
    "neuron",
    "python-depends",
    "xpu",
)
_TORCH = ("include", "minver", "maxver", "pyext", "src")
_TOP = ("general", "kernel", "torch", "tvm-ffi")


def read(tables: Tables) -> Project:
    """A v3 file as the project model."""
    top = tables.top(_TOP)
    general = tables.required_table(top, "general", _GENERAL)
    cuda = tables.sub_table(general, "cuda", ("minver", "maxver", "python-depends"))
    for backend in ("neuron", "xpu"):
        tables.sub_table(general, backend, ("python-depends",))
    tables.hub(general)
    framework = tables.framework(top, _TORCH, None, stable_abi=None)
    return tables.project(
        top, general, cuda, framework, format="v3", required=False, urls=("upstream",)
    )
