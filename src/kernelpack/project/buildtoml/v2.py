"""`build.toml` v2: the oldest format kernelpack reads (`universal = …`, no `backends`).

`[general]` holds the CUDA range itself (`cuda-minver`, `cuda-maxver`) and `universal`; the
backends are those of the kernels, or every backend for a universal (Python-only) project,
which has no `[torch]` table. kernelpack upgrades it in memory with one note.
"""

from __future__ import annotations

from kernelpack.project.buildtoml._tables import Tables
from kernelpack.project.buildtoml.model import BACKENDS, Noarch, Project, Torch

__all__ = ["looks_like", "read"]

_GENERAL = ("name", "universal", "cuda-maxver", "cuda-minver", "hub", "python-depends")
_TORCH = ("include", "minver", "maxver", "pyext", "src")
_PYTHON_DEPENDS = ("einops", "nvidia-cutlass-dsl")


def looks_like(data: dict[str, object]) -> bool:
    """Whether a file without `edition` is in this format: `[general]` has `universal` or no
    `backends` (every later format requires `backends`)."""
    general = data.get("general")
    return isinstance(general, dict) and ("universal" in general or "backends" not in general)


def read(tables: Tables) -> Project:
    """A v2 file as the project model."""
    top = tables.top(("general", "kernel", "torch"))
    general = tables.required_table(top, "general", _GENERAL)
    universal = bool(general.boolean("universal"))
    tables.hub(general)
    low = general.version("cuda-minver", example="12.8")
    high = general.version("cuda-maxver", example="12.9")
    python_depends = general.strings("python-depends", expected="Python dependency names")
    for name in python_depends:
        if name not in _PYTHON_DEPENDS:
            raise general.error(
                "python-depends",
                f'unknown dependency "{name}"',
                f"expected {', '.join(_PYTHON_DEPENDS)}",
            )
    kernels = tables.kernels(top)
    framework: Torch | Noarch
    if universal:
        if "torch" in top.data:
            raise top.error("torch", "is not allowed with universal = true", None)
        framework, backends = Noarch(), tuple(b for b in BACKENDS if b != "tpu")
    else:
        framework = tables.torch(top, _TORCH, None, required=True)
        backends = tuple(sorted({kernel.backend for kernel in kernels}))
    return Project(
        path=tables.path,
        format="v2",
        name=tables.name(general),
        version=1,
        license=None,
        backends=backends,
        framework=framework,
        kernels=kernels,
        cuda_minver=low,
        cuda_maxver=high,
        python_depends=tuple(n for n in python_depends if n != "nvidia-cutlass-dsl"),
        cuda_python_depends=tuple(n for n in python_depends if n == "nvidia-cutlass-dsl"),
    )
