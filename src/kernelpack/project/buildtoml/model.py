"""The one model of a kernel-builder project, whatever format its `build.toml` is written in.

Each format reader (`edition5`, `v4`, `v3`, `v2`) checks the tables and keys of its own
format and converts them into these values, as kernel-builder's `v3`/`v4`/`v5` → `Build`
conversions do; `translate` makes a kernelpack `Manifest` from this model only. Values are
as written (paths relative to `build.toml`, capability strings unparsed): what they mean on
this machine is decided later.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

__all__ = [
    "BACKENDS",
    "Kernel",
    "Noarch",
    "Project",
    "Torch",
    "namespace",
]

#: Every backend kernel-builder knows (kernelpack builds `cuda` and `cpu`).
BACKENDS = ("cann", "cpu", "cuda", "metal", "neuron", "rocm", "tpu", "xpu")


@dataclass(frozen=True)
class Kernel:
    """One `[kernel.<name>]` table: sources of one backend with their own settings."""

    name: str
    backend: str
    src: tuple[str, ...]
    depends: tuple[str, ...]
    include: tuple[str, ...] = ()
    cxx_flags: tuple[str, ...] = ()
    cuda_capabilities: tuple[str, ...] | None = None
    """As written (`"9.0a"`, `"8.0+PTX"`, `"11.8"`); None: kernel-builder's default set."""
    cuda_flags: tuple[str, ...] = ()
    cuda_minver: Version | None = None
    """Below this CUDA the kernel is left out of the library (kernel-builder drops it)."""

    @property
    def table(self) -> str:
        """The table's name in messages: `kernel.<name>`."""
        return f"kernel.{self.name}"


@dataclass(frozen=True)
class Torch:
    """`[torch]`: the binding sources and the torch-wide settings of a compiled project."""

    src: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    minver: Version | None = None
    maxver: Version | None = None
    pyext: tuple[str, ...] | None = None
    cxx_flags: tuple[str, ...] = ()
    stable_abi: Mapping[str, Version] = field(default_factory=dict)
    """Backend -> stable-ABI target; a backend left out builds against the classic ABI (a
    single `stable-abi = "2.9"` names every backend)."""


@dataclass(frozen=True)
class Noarch:
    """`[torch-noarch]` (or a v3 file with no framework table): Python only."""

    pyext: tuple[str, ...] | None = None
    cuda_capabilities: tuple[str, ...] | None = None
    rocm_archs: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Project:
    """A `build.toml`, read by the reader of its format."""

    path: Path
    """Absolute path of `build.toml`; its folder is the project root."""
    format: str
    """`edition 5`, `v4`, `v3` or `v2`: the format the file is written in."""
    name: str
    version: int
    """The kernel's major version (`[general].version`; 1 where a format leaves it out)."""
    license: str | None
    backends: tuple[str, ...]
    framework: Torch | Noarch
    kernels: tuple[Kernel, ...] = ()
    cuda_minver: Version | None = None
    cuda_maxver: Version | None = None
    python_depends: tuple[str, ...] = ()
    """`[general].python-depends`: kernel-builder's names of Python packages."""
    cuda_python_depends: tuple[str, ...] = ()
    """`[general.cuda].python-depends`: for the CUDA build only."""
    upstream: str | None = None
    note: str | None = None
    """One line for the user when the format is an older one, read by upgrading it."""

    @property
    def root(self) -> Path:
        return self.path.parent

    @property
    def python_name(self) -> str:
        """The import name: `relu_torch_stable_abi`."""
        return self.name.replace("-", "_")

    @property
    def package_dir(self) -> Path:
        """`torch-ext/<python_name>`, where kernel-builder keeps the Python package."""
        return self.root / "torch-ext" / self.python_name

    @property
    def namespace(self) -> str:
        """The extension module and op namespace: `_relu_1a2b3c4`."""
        return namespace(self.python_name, self.version)

    @property
    def noarch(self) -> bool:
        return isinstance(self.framework, Noarch)

    @property
    def pyext(self) -> tuple[str, ...]:
        """File extensions of the package's files to ship (`py` and `pyi` always)."""
        listed = self.framework.pyext or ()
        return tuple(dict.fromkeys(("py", "pyi", *listed)))


def namespace(python_name: str, version: int) -> str:
    """`_<python_name>_<7 hex digits>`, unique per project name and major version.

    Derived from the name and major version, not from a git revision: the same in every clone,
    and unchanged by an edit (which then recompiles only what it touches)."""
    digest = hashlib.sha256(f"kernelpack\0{python_name}\0{version}".encode()).hexdigest()
    return f"_{python_name}_{digest[:7]}"
