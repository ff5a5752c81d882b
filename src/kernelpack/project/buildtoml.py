"""`build.toml`: a Hugging Face kernel-builder project (edition 5), read as a kernelpack `Manifest`.

kernel-builder builds ONE extension per project, `_<name>_<hash>`, holding every kernel of
the backend being built plus the `[torch]` binding sources, registers its ops in the
namespace of the same name and generates `torch-ext/<name>/_ops.py` (`ops`,
`add_op_namespace_prefix`) that imports it. kernelpack maps that onto its own model:

- the package is `torch-ext/<name>/` (`-` in the name becomes `_`), unchanged;
- one kernelpack kernel, `_ops` (the module that loads the library), whose sources are every
  CUDA kernel's `src` plus `[torch].src`, whose library is `<package>/_<name>_<hash>…so`
  (module, `TORCH_EXTENSION_NAME` and ops namespace alike) and whose `_ops.py` kernelpack
  generates; `registration.h` (the `TORCH_LIBRARY_EXPAND` / `STABLE_TORCH_LIBRARY_EXPAND` /
  `REGISTER_EXTENSION` macros) is generated onto the include path when the project ships none;
- each kernel of another backend (`cpu`, `metal`, `rocm`, `xpu`, …) is listed and skipped
  (`platform-excluded`), so the build record says why it is not there.

`<hash>` is derived from the project's name and major version, not from a git revision: it
is the same in every clone and does not change with each edit, so an edit recompiles only
what it touches. Paths are relative to the folder of `build.toml` and must stay inside it.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.version import Version

from kernelpack.errors import ManifestError
from kernelpack.project._toml import (
    ANY_PLATFORM,
    Table,
    describe,
    display_path,
    is_inside,
    path_too_long,
    quote,
    read_toml,
)
from kernelpack.project.manifest import KernelSpec, Manifest
from kernelpack.project.settings import Settings
from kernelpack_runtime.arch import Arch, InvalidArch
from kernelpack_runtime.reason import Reason

__all__ = [
    "BUILD_TOML",
    "CPU_KERNEL",
    "DEFAULT_CAPABILITIES",
    "DEPENDS",
    "KERNEL",
    "BuildToml",
    "load",
    "namespace",
    "ops_py",
    "read",
    "registration_h",
]

#: The file name kernel-builder reads.
BUILD_TOML = "build.toml"

#: The kernelpack kernel that holds a `build.toml` project's CUDA library.
KERNEL = "_ops"
#: The kernelpack kernel that holds a `build.toml` project's CPU library (its `backend =
#: "cpu"` kernels, compiled by the host C++ compiler).
CPU_KERNEL = "_ops_cpu"

#: What kernel-builder builds a CUDA kernel for when it lists no `cuda-capabilities` (its
#: list for CUDA 13), plus PTX of the highest; the plan keeps those this nvcc can build.
DEFAULT_CAPABILITIES = ("7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "11.0", "12.0")

#: kernel-builder `depends` name -> kernelpack dependency (None: nothing to add, torch's
#: headers are always there). Every `cutlass_X_Y` maps to kernelpack's `cutlass` (the
#: `nvidia-cutlass` wheel, or `KERNELPACK_CUTLASS_DIR`); a `[tool.kernelpack.deps]` entry of
#: the same name (e.g. `cutlass_3_6 = "third_party/cutlass/include"`) wins.
DEPENDS: Mapping[str, str | None] = {
    "torch": None,
    "cutlass_2_10": "cutlass",
    "cutlass_3_5": "cutlass",
    "cutlass_3_6": "cutlass",
    "cutlass_3_8": "cutlass",
    "cutlass_3_9": "cutlass",
    "cutlass_4_0": "cutlass",
    "cutlass_4_2": "cutlass",
}
# Names kernel-builder knows for the backends kernelpack does not build: valid there, unused.
_OTHER_BACKEND_DEPENDS = frozenset({"sycl_tla", "metal-cpp"})

_BACKENDS = ("cann", "cpu", "cuda", "metal", "neuron", "rocm", "tpu", "xpu")
_EDITION = 5
_GENERAL_KEYS = (
    "name",
    "version",
    "edition",
    "license",
    "upstream",
    "source",
    "minver",
    "backends",
    "cuda",
    "hub",
    "kernel-depends",
    "neuron",
    "python-depends",
    "tpu",
    "xpu",
)
_GENERAL_CUDA_KEYS = ("minver", "maxver", "kernel-depends", "python-depends")
_GENERAL_BACKEND_KEYS = ("kernel-depends", "python-depends")
_HUB_KEYS = ("repo-id", "branch")
_TORCH_KEYS = ("include", "minver", "maxver", "pyext", "src", "stable-abi", "cxx-flags")
_NOARCH_KEYS = ("pyext", "cuda-capabilities", "rocm-archs")
_FRAMEWORKS = ("torch", "torch-noarch", "tvm-ffi")
_COMMON_KERNEL_KEYS = ("backend", "depends", "src", "include", "cxx-flags")
_KERNEL_KEYS: Mapping[str, tuple[str, ...]] = {
    "cuda": (*_COMMON_KERNEL_KEYS, "cuda-capabilities", "cuda-flags", "cuda-minver"),
    "cpu": _COMMON_KERNEL_KEYS,
    "metal": _COMMON_KERNEL_KEYS,
    "rocm": (*_COMMON_KERNEL_KEYS, "rocm-archs", "hip-flags"),
    "xpu": (*_COMMON_KERNEL_KEYS, "sycl-flags"),
}
_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_\-]*", re.IGNORECASE)
_COMPILED_SUFFIXES = frozenset({".cu", ".cpp", ".cc", ".cxx", ".c"})


@dataclass(frozen=True)
class BuildToml:
    """The facts of a `build.toml` that place its project (no sources read)."""

    path: Path
    """Absolute path of `build.toml`; its folder is the project root."""
    name: str
    """`[general].name`, e.g. `relu-torch-stable-abi`."""
    version: int
    """`[general].version`: the kernel's major version."""
    license: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)
    """The parsed file."""

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


def namespace(python_name: str, version: int) -> str:
    """`_<python_name>_<7 hex digits>`, unique per project name and major version."""
    digest = hashlib.sha256(f"kernelpack\0{python_name}\0{version}".encode()).hexdigest()
    return f"_{python_name}_{digest[:7]}"


def read(path: Path) -> BuildToml:
    """Parse `path` far enough to place the project: `[general]` name, version, edition."""
    path = Path(path).absolute()
    shown = display_path(path)
    data = read_toml(path)
    general = data.get("general")
    if not isinstance(general, dict):
        raise ManifestError(
            shown,
            "has no [general] table" if general is None else f"[general] is {describe(general)}",
            expected="expected [general] with name, version, edition = 5 and backends",
        )
    table = Table(shown, "general", general)
    edition = general.get("edition")
    if edition != _EDITION:
        got = "is missing" if edition is None else f"got {describe(edition)}"
        raise table.error(
            "edition",
            got,
            f"expected edition = {_EDITION} (older files: `kernel-builder update-build`)",
        )
    name = table.string("name", expected='a kernel name such as "relu"')
    if name is None:
        raise table.error("name", "is missing", 'expected e.g. name = "relu"')
    python_name = name.replace("-", "_")
    if not _NAME_RE.fullmatch(name) or not python_name.isidentifier():
        raise table.error("name", f'"{name}" is not a kernel name', 'expected e.g. "relu"')
    too_long = path_too_long(python_name)  # it names the package folder
    if too_long is not None:
        raise table.error("name", f"{quote(name)} {too_long}", 'expected e.g. "relu"')
    version = general.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        got = "is missing" if version is None else f"got {describe(version)}"
        raise table.error("version", got, "expected the major version, e.g. version = 1")
    license_ = table.string("license", expected='an SPDX expression such as "Apache-2.0"')
    return BuildToml(path=path, name=name, version=version, license=license_, data=data)


def load(
    path: Path,
    *,
    settings: Settings | None = None,
    allow_missing_sources: bool = False,
) -> Manifest:
    """Parse `path` (a `build.toml`) into a `Manifest`; raise `ManifestError` on any problem.

    Every table and key is checked (unknown keys are errors, as in `kernels.toml`); the
    sources of the CUDA kernels and of `[torch]` must exist (with `allow_missing_sources`
    the library is skipped as `sources-missing` instead). `settings` (a `[tool.kernelpack]`
    next to it, if any) add `depends` names.
    """
    project = read(path)
    reader = _Reader(project, settings or Settings(), allow_missing_sources)
    return reader.manifest()


def ops_py(module: str, *, compiled: bool = True, kernels: tuple[str, ...] = ()) -> str:
    """The `_ops.py` kernel-builder generates: `ops` is `torch.ops.<module>`, and
    `add_op_namespace_prefix("relu")` is `"<module>::relu"`.

    With `kernels` (the libraries of a kernelpack build, CUDA first), the first one usable
    here is loaded through the package's registry and `ops` is its namespace; when none is,
    importing `_ops.py` (and so the package) raises `KernelUnavailableError` with the reason.
    """
    if kernels:
        return f'''\
# Generated by kernelpack from build.toml (as kernel-builder generates it): do not edit.
# The build's libraries, CUDA first: the first one usable here is loaded.
import torch
from kernelpack_runtime import load_first

NAMESPACE: str = load_first(__package__, {kernels!r})
ops = getattr(torch.ops, NAMESPACE)


def add_op_namespace_prefix(op_name: str) -> str:
    """The op's name in this build's namespace: "<namespace>::<op_name>"."""
    return f"{{NAMESPACE}}::{{op_name}}"
'''
    load_library = f"from . import {module}\n" if compiled else ""
    return f'''\
# Generated by kernelpack from build.toml (as kernel-builder generates it): do not edit.
import torch
{load_library}
ops = torch.ops.{module}


def add_op_namespace_prefix(op_name: str) -> str:
    """The op's name in this build's namespace: "{module}::<op_name>"."""
    return f"{module}::{{op_name}}"
'''


def registration_h() -> str:
    """The `registration.h` kernel-builder generates for projects that ship none.

    The `*_EXPAND` macros expand their NAME argument (`TORCH_EXTENSION_NAME`) before torch's
    macros paste it; `REGISTER_EXTENSION(NAME)` defines the module init `PyInit_<NAME>`.
    Nothing here includes torch: the binding includes the registration header it uses.
    """
    return """\
// Generated by kernelpack for a build.toml project (as kernel-builder generates it).
#pragma once

#include <Python.h>

#define _CONCAT(A, B) A##B
#define CONCAT(A, B) _CONCAT(A, B)

#define _STRINGIFY(A) #A
#define STRINGIFY(A) _STRINGIFY(A)

#define TORCH_LIBRARY_EXPAND(NAME, MODULE) TORCH_LIBRARY(NAME, MODULE)
#define TORCH_LIBRARY_FRAGMENT_EXPAND(NAME, MODULE) TORCH_LIBRARY_FRAGMENT(NAME, MODULE)
#define TORCH_LIBRARY_IMPL_EXPAND(NAME, DEVICE, MODULE) TORCH_LIBRARY_IMPL(NAME, DEVICE, MODULE)

#define STABLE_TORCH_LIBRARY_EXPAND(NAME, MODULE) STABLE_TORCH_LIBRARY(NAME, MODULE)
#define STABLE_TORCH_LIBRARY_FRAGMENT_EXPAND(NAME, MODULE) \\
  STABLE_TORCH_LIBRARY_FRAGMENT(NAME, MODULE)
#define STABLE_TORCH_LIBRARY_IMPL_EXPAND(NAME, DEVICE, MODULE) \\
  STABLE_TORCH_LIBRARY_IMPL(NAME, DEVICE, MODULE)

#define REGISTER_EXTENSION(NAME)                                                  \\
  PyMODINIT_FUNC CONCAT(PyInit_, NAME)() {                                        \\
    static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, STRINGIFY(NAME),   \\
                                        nullptr, 0, nullptr};                     \\
    return PyModule_Create(&module);                                              \\
  }
"""


@dataclass(frozen=True)
class _Cuda:
    """One `[kernel.<name>]` with `backend = "cuda"`, read."""

    name: str
    sources: tuple[Path, ...]
    include_dirs: tuple[Path, ...]
    capabilities: tuple[str, ...] | None
    cuda_flags: tuple[str, ...]
    cxx_flags: tuple[str, ...]
    min_cuda: Version | None
    depends: tuple[str, ...]


class _Reader:
    def __init__(self, project: BuildToml, settings: Settings, allow_missing: bool) -> None:
        self.project = project
        self.settings = settings
        self.allow_missing = allow_missing
        self.shown = display_path(project.path)
        self.root = project.root.resolve()
        self.missing: list[str] = []

    def table(self, name: str | None, data: Mapping[str, Any]) -> Table:
        return Table(self.shown, name, data)

    def sub_table(self, parent: Table, key: str, known: tuple[str, ...]) -> Table | None:
        value = parent.data.get(key)
        if value is None:
            return None
        name = f"{parent.name}.{key}" if parent.name else key
        if not isinstance(value, dict):
            raise parent.error(key, f"got {describe(value)}", f"expected a [{name}] table")
        table = self.table(name, value)
        table.check_keys(known)
        return table

    # -- the whole file -----------------------------------------------------------------------

    def manifest(self) -> Manifest:
        data = self.project.data
        top = self.table(None, data)
        top.check_keys(("general", "kernel", *_FRAMEWORKS))
        general = self.table("general", data["general"])
        general.check_keys(_GENERAL_KEYS)
        backends = self.backends(general)
        min_cuda, max_cuda = self.general(general)
        framework = self.framework(top, data)
        kernels_value = data.get("kernel", {})
        if not isinstance(kernels_value, dict):
            raise top.error("kernel", f"got {describe(kernels_value)}", "expected [kernel.<name>]")
        package_dir = self.project.package_dir
        if not package_dir.is_dir():
            raise general.error(
                "name",
                f"the package folder {display_path(package_dir)} does not exist",
                f"expected the Python package in torch-ext/{self.project.python_name}/",
            )
        ns = self.project.namespace
        if framework == "torch-noarch":
            return self.noarch(top, bool(kernels_value))

        torch = self.table("torch", self.framework_table(top, "torch"))
        torch.check_keys(_TORCH_KEYS)
        torch.strings("pyext", expected="file extensions")
        min_torch, max_torch = self.torch_range(torch)
        stable = self.stable_abi(torch, "cuda")
        stable_cpu = self.stable_abi(torch, "cpu")
        sources = self.paths(torch, "src", required=True)
        includes = self.folders(torch, "include")
        cxx = torch.strings("cxx-flags", expected="C++ compiler flags")
        cuda, cpu, skipped = self.kernels(top, kernels_value, backends, stable)
        libraries: list[KernelSpec] = []
        if cuda or not cpu:
            library = self.library(ns, cuda, sources, includes, cxx, stable, min_cuda, max_cuda)
            if not cuda:
                library = _replace_skip(
                    library,
                    Reason("platform-excluded", "build.toml declares no CUDA kernel to build"),
                )
            libraries.append(library)
        if cpu:
            libraries.append(self.cpu_library(ns, cpu, sources, includes, cxx, stable_cpu))
        libraries = [replace(spec, min_torch=min_torch, max_torch=max_torch) for spec in libraries]
        return Manifest(
            path=self.project.path,
            package=self.project.python_name,
            package_dir=package_dir,
            kernels=(*libraries, *skipped),
            generated={"_ops.py": ops_py(ns, kernels=tuple(spec.name for spec in libraries))},
        )

    def torch_range(self, torch: Table) -> tuple[Version | None, Version | None]:
        """`[torch]`'s minver and maxver: the torch versions the project builds against."""
        min_torch = torch.version("minver", example="2.10")
        max_torch = torch.version("maxver", example="2.12")
        if min_torch is not None and max_torch is not None and min_torch > max_torch:
            raise torch.error(
                "maxver",
                f'"{max_torch}" is below minver "{min_torch}"',
                "expected maxver >= minver",
            )
        return min_torch, max_torch

    def general(self, general: Table) -> tuple[Version | None, Version | None]:
        """Check `[general]`'s other keys and tables; return its CUDA range (minver, maxver)."""
        cuda_general = self.sub_table(general, "cuda", _GENERAL_CUDA_KEYS)
        self.sub_table(general, "hub", _HUB_KEYS)
        for backend in ("neuron", "xpu"):
            self.sub_table(general, backend, _GENERAL_BACKEND_KEYS)
        self.sub_table(general, "tpu", ("python-depends",))
        for key in ("upstream", "source"):
            general.string(key, expected="a git URL")
        general.strings("python-depends", expected="Python dependency names")
        if cuda_general is None:
            return None, None
        return (
            cuda_general.version("minver", example="12.8"),
            cuda_general.version("maxver", example="12.9"),
        )

    def framework(self, top: Table, data: Mapping[str, Any]) -> str:
        """The one framework table the file has: `torch` or `torch-noarch`."""
        frameworks = [name for name in _FRAMEWORKS if name in data]
        if len(frameworks) != 1:
            problem = "has no framework table" if not frameworks else "has several frameworks"
            raise top.error(
                None,
                f"{problem} ({', '.join(f'[{f}]' for f in frameworks) or 'none'})",
                "expected exactly one of [torch] (compiled) or [torch-noarch]",
            )
        if frameworks[0] == "tvm-ffi":
            raise top.error(
                "tvm-ffi",
                "is not supported by kernelpack (it builds Torch extensions)",
                "expected a [torch] or [torch-noarch] project",
            )
        return frameworks[0]

    def noarch(self, top: Table, has_kernels: bool) -> Manifest:
        """A `[torch-noarch]` project: no kernel, only its generated `_ops.py`."""
        noarch = self.table("torch-noarch", self.framework_table(top, "torch-noarch"))
        noarch.check_keys(_NOARCH_KEYS)
        noarch.strings("pyext", expected="file extensions")
        if has_kernels:
            raise top.error("kernel", "is not allowed with [torch-noarch]", None)
        return Manifest(
            path=self.project.path,
            package=self.project.python_name,
            package_dir=self.project.package_dir,
            kernels=(),
            generated={"_ops.py": ops_py(self.project.namespace, compiled=False)},
        )

    def kernels(
        self,
        top: Table,
        kernels: Mapping[str, Any],
        backends: tuple[str, ...],
        stable: Version | None,
    ) -> tuple[list[_Cuda], list[_Cuda], list[KernelSpec]]:
        """The `[kernel.<name>]` tables: the CUDA ones and the CPU ones to build into their
        libraries, and a skipped spec for each of another backend."""
        cuda: list[_Cuda] = []
        cpu: list[_Cuda] = []
        skipped: list[KernelSpec] = []
        for name, value in kernels.items():
            if name == KERNEL:
                raise top.error(
                    f"kernel.{name}",
                    f"the name {KERNEL} is kernelpack's for the project's library",
                    "expected another kernel name",
                )
            kernel = self.kernel_table(name, value)
            backend = str(kernel.data["backend"])
            if backend == "cuda" and "cuda" in backends:
                cuda.append(self.cuda_kernel(kernel))
                continue
            if backend == "cpu" and "cpu" in backends:
                cpu.append(self.cuda_kernel(kernel))
                continue
            self.paths(kernel, "src", required=True, check=False)
            kernel.strings("depends", expected="dependency names")
            why = (
                f'backend = "{backend}": kernelpack builds the CUDA and CPU kernels of a '
                "build.toml only"
                if backend not in ("cuda", "cpu")
                else f'backend = "{backend}" is not in [general].backends'
            )
            reason = Reason("platform-excluded", why)
            skipped.append(self.skipped(name, self.project.namespace, reason, stable))
        return cuda, cpu, skipped

    def framework_table(self, top: Table, key: str) -> Mapping[str, Any]:
        value = top.data[key]
        if not isinstance(value, dict):
            raise top.error(key, f"got {describe(value)}", f"expected a [{key}] table")
        return value

    def backends(self, general: Table) -> tuple[str, ...]:
        if "backends" not in general.data:
            raise general.error("backends", "is missing", 'expected e.g. backends = ["cuda"]')
        names = general.strings("backends", expected="backend names", allow_empty=False)
        for name in names:
            if name not in _BACKENDS:
                raise general.error(
                    "backends", f'unknown backend "{name}"', _one_of("expected", _BACKENDS, name)
                )
        return names

    def stable_abi(self, torch: Table, backend: str) -> Version | None:
        """The stable-ABI target of `backend`'s build: `stable-abi = "2.11"` (every backend)
        or `[torch.stable-abi] cuda = "2.11"`; None builds against the classic ABI."""
        value = torch.data.get("stable-abi")
        if value is None:
            return None
        if isinstance(value, dict):
            table = self.table("torch.stable-abi", value)
            table.check_keys(_BACKENDS)
            for backend in value:
                table.version(backend, example="2.11")
            target = table.version(backend, example="2.11")
        else:
            target = torch.version("stable-abi", example="2.11")
        if target is not None and target < Version("2.10"):
            raise torch.error(
                "stable-abi",
                f'"{target}" is below the oldest stable ABI target',
                'expected "2.10" or later',
            )
        return target

    # -- kernels ------------------------------------------------------------------------------

    def kernel_table(self, name: str, value: object) -> Table:
        label = f"kernel.{name}"
        if not isinstance(value, dict):
            raise self.table(None, {}).error(
                label, f"got {describe(value)}", f"expected a [{label}] table"
            )
        kernel = self.table(label, value)
        backend = kernel.data.get("backend")
        if backend is None:
            raise kernel.error("backend", "is missing", 'expected e.g. backend = "cuda"')
        if not isinstance(backend, str) or backend not in _KERNEL_KEYS:
            shown = backend if isinstance(backend, str) else describe(backend)
            raise kernel.error(
                "backend",
                f'unknown backend "{shown}"',
                _one_of("expected", tuple(_KERNEL_KEYS), str(shown)),
            )
        kernel.check_keys(_KERNEL_KEYS[backend])
        if "depends" not in kernel.data:
            raise kernel.error("depends", "is missing", 'expected e.g. depends = ["torch"]')
        for key in ("cxx-flags", "rocm-archs", "hip-flags", "sycl-flags"):
            kernel.strings(key, expected="strings")
        return kernel

    def cuda_kernel(self, kernel: Table) -> _Cuda:
        capabilities = None
        if "cuda-capabilities" in kernel.data:
            capabilities = kernel.strings(
                "cuda-capabilities", expected='capabilities such as "9.0"', allow_empty=False
            )
            for capability in capabilities:
                try:
                    Arch.parse(capability.removesuffix("+PTX"))
                except InvalidArch as exc:
                    raise kernel.error("cuda-capabilities", str(exc)) from None
        assert kernel.name is not None
        return _Cuda(
            name=kernel.name.removeprefix("kernel."),
            sources=self.paths(kernel, "src", required=True),
            include_dirs=self.folders(kernel, "include"),
            capabilities=capabilities,
            cuda_flags=kernel.strings("cuda-flags", expected="nvcc flags"),
            cxx_flags=kernel.strings("cxx-flags", expected="C++ compiler flags"),
            min_cuda=kernel.version("cuda-minver", example="12.8"),
            depends=self.depends(kernel),
        )

    def depends(self, kernel: Table) -> tuple[str, ...]:
        names: list[str] = []
        for dep in kernel.strings("depends", expected="dependency names"):
            if dep in self.settings.deps:
                names.append(dep)
                continue
            if dep in _OTHER_BACKEND_DEPENDS:
                raise kernel.error(
                    "depends",
                    f'"{dep}" is a dependency of another backend than CUDA',
                    "expected CUDA dependencies (torch, cutlass_X_Y)",
                )
            if dep not in DEPENDS:
                known = sorted(DEPENDS)
                raise kernel.error(
                    "depends",
                    f'unknown dependency "{dep}"',
                    _one_of("expected", tuple(known), dep) + " or a name in [tool.kernelpack.deps]",
                )
            mapped = DEPENDS[dep]
            if mapped is not None:
                names.append(mapped)
        return tuple(dict.fromkeys(names))

    def skipped(self, name: str, ns: str, reason: Reason, stable: Version | None) -> KernelSpec:
        return KernelSpec(
            name=name,
            folder=self.project.package_dir,
            namespace=ns,
            sources=(),
            arch={ANY_PLATFORM: ()},
            abi="stable" if stable is not None else "torch",
            stable_target=stable or Version("2.10"),
            skip=reason,
        )

    def library(
        self,
        ns: str,
        cuda: list[_Cuda],
        torch_sources: tuple[Path, ...],
        torch_includes: tuple[Path, ...],
        torch_cxx: tuple[str, ...],
        stable: Version | None,
        min_cuda: Version | None,
        max_cuda: Version | None,
    ) -> KernelSpec:
        """The one kernelpack kernel holding every CUDA kernel and the binding."""
        capabilities = _same(self.shown, cuda, "cuda-capabilities", lambda k: k.capabilities)
        nvcc_flags = _same(self.shown, cuda, "cuda-flags", lambda k: k.cuda_flags) or ()
        cxx_flags = _same(self.shown, cuda, "cxx-flags", lambda k: k.cxx_flags) or ()
        arch: Mapping[str, tuple[Arch, ...]]
        if capabilities is None and self.settings.arch is not None:
            arch, ptx = self.settings.arch, False  # [tool.kernelpack] arch: the project's default
        else:
            wanted = capabilities or tuple(
                f"{c}+PTX" if c == DEFAULT_CAPABILITIES[-1] else c for c in DEFAULT_CAPABILITIES
            )
            parsed = {Arch.parse(c.removesuffix("+PTX")) for c in wanted}
            arch = {ANY_PLATFORM: tuple(sorted(parsed))}
            ptx = any(c.endswith("+PTX") for c in wanted)
        for kernel in cuda:
            if kernel.min_cuda is not None and (min_cuda is None or kernel.min_cuda > min_cuda):
                min_cuda = kernel.min_cuda
        sources = {p: None for kernel in cuda for p in kernel.sources}
        sources.update({p: None for p in torch_sources})
        includes = {p: None for p in torch_includes}
        includes.update({p: None for kernel in cuda for p in kernel.include_dirs})
        depends = {d: None for kernel in cuda for d in kernel.depends}
        shipped = (
            any(p.name == "registration.h" for p in sources)
            or (self.project.root / "torch-ext" / "registration.h").is_file()
        )
        names = ", ".join(k.name for k in cuda) or "none"
        missing = None
        if self.missing:
            missing = f"{self.shown}: {self.missing[0]}"
        return KernelSpec(
            name=KERNEL,
            folder=self.project.package_dir,
            namespace=ns,
            sources=() if missing else tuple(sources),
            arch=arch,
            abi="stable" if stable is not None else "torch",
            description=f"kernel-builder project {self.project.name} (CUDA kernels: {names})",
            include_dirs=tuple(includes),
            stable_target=stable or Version("2.10"),
            ptx=ptx,
            min_cuda=min_cuda,
            depends=tuple(depends),
            # kernel-builder's build: -fno-gnu-unique keeps template statics of two loaded
            # kernels apart; CUDA_KERNEL selects the CUDA branch of the binding.
            nvcc_flags=("-Xcompiler=-fno-gnu-unique", *nvcc_flags),
            cxx_flags=("-fno-gnu-unique", *torch_cxx, *cxx_flags),
            defines={"CUDA_KERNEL": "1", "USE_CUDA": "1"},
            missing_sources=missing,
            module=ns,
            max_cuda=max_cuda,
            loose_archs=True,
            generated_headers={} if shipped else {"registration.h": registration_h()},
        )

    def cpu_library(
        self,
        ns: str,
        cpu: list[_Cuda],
        torch_sources: tuple[Path, ...],
        torch_includes: tuple[Path, ...],
        torch_cxx: tuple[str, ...],
        stable: Version | None,
    ) -> KernelSpec:
        """The one kernelpack kernel holding every CPU kernel and the binding (compiled with
        `CPU_KERNEL`), as kernel-builder's CPU build; its module and op namespace are the
        project's with `_cpu` appended, so it loads beside the CUDA library."""
        cxx_flags = _same(self.shown, cpu, "cxx-flags", lambda k: k.cxx_flags) or ()
        sources = {p: None for kernel in cpu for p in kernel.sources}
        sources.update({p: None for p in torch_sources})
        includes = {p: None for p in torch_includes}
        includes.update({p: None for kernel in cpu for p in kernel.include_dirs})
        depends = {d: None for kernel in cpu for d in kernel.depends}
        shipped = (
            any(p.name == "registration.h" for p in sources)
            or (self.project.root / "torch-ext" / "registration.h").is_file()
        )
        missing = f"{self.shown}: {self.missing[0]}" if self.missing else None
        module = f"{ns}_cpu"
        return KernelSpec(
            name=CPU_KERNEL,
            folder=self.project.package_dir,
            namespace=module,
            sources=() if missing else tuple(sources),
            arch={ANY_PLATFORM: ()},
            abi="stable" if stable is not None else "torch",
            backend="cpu",
            description=f"kernel-builder project {self.project.name} (CPU kernels: "
            + ", ".join(k.name for k in cpu)
            + ")",
            include_dirs=tuple(includes),
            stable_target=stable or Version("2.10"),
            depends=tuple(depends),
            cxx_flags=("-fno-gnu-unique", *torch_cxx, *cxx_flags),
            defines={"CPU_KERNEL": "1"},
            missing_sources=missing,
            module=module,
            generated_headers={} if shipped else {"registration.h": registration_h()},
        )

    # -- paths --------------------------------------------------------------------------------

    def paths(
        self, table: Table, key: str, *, required: bool = False, check: bool = True
    ) -> tuple[Path, ...]:
        if required and key not in table.data:
            raise table.error(key, "is missing", f'expected e.g. {key} = ["kernel/kernel.cu"]')
        found: dict[Path, None] = {}
        for entry in table.strings(key, expected="file paths", allow_empty=not required):
            path = self.inside(table, key, entry)
            if not check:
                continue
            if not path.exists():
                if not self.allow_missing:
                    raise table.error(
                        key, f'"{entry}" does not exist', "expected files relative to build.toml"
                    )
                self.missing.append(f'[{table.name}].{key}: "{entry}" does not exist')
            elif not path.is_file():
                raise table.error(key, f'"{entry}" is not a file', "expected a source file")
            found[path] = None
        return tuple(found)

    def folders(self, table: Table, key: str) -> tuple[Path, ...]:
        found: dict[Path, None] = {}
        for entry in table.strings(key, expected="folders"):
            path = self.inside(table, key, entry)
            if not path.is_dir():
                raise table.error(
                    key, f'"{entry}" is not a folder', "expected folders relative to build.toml"
                )
            found[path] = None
        return tuple(found)

    def inside(self, table: Table, key: str, entry: str) -> Path:
        """`entry` resolved against the project root; raise when it leaves the project."""
        too_long = path_too_long(entry)
        if too_long is not None:
            raise table.error(key, f"{quote(entry)} {too_long}", "expected a shorter path")
        if Path(entry).is_absolute() or entry.startswith("~"):
            raise table.error(
                key, f'"{entry}" is an absolute path', "expected a path relative to build.toml"
            )
        path = Path(os.path.normpath(self.project.root / entry))
        if not is_inside(path, self.project.root) or not is_inside(path.resolve(), self.root):
            raise table.error(
                key,
                f'"{entry}" points outside the project',
                f"expected a path inside {display_path(self.project.root)}",
            )
        return path


def _same(shown: str, cuda: list[_Cuda], key: str, get: Any) -> tuple[str, ...] | None:
    """The one value of `key` the CUDA kernels share: kernelpack compiles them into one
    library, with one set of capabilities and flags. Kernels that leave `cuda-capabilities`
    out run anywhere and take the others' set."""
    values = {k.name: get(k) for k in cuda}
    if key == "cuda-capabilities":
        values = {name: v for name, v in values.items() if v is not None}
    distinct = {tuple(v or ()) for v in values.values()}
    if len(distinct) <= 1:
        return next(iter(distinct)) if distinct else None
    (a, first), (b, second) = list(values.items())[:2]
    for name, value in values.items():
        if tuple(value or ()) != tuple(first or ()):
            b, second = name, value
            break
    raise ManifestError(
        shown,
        f"{key} differs between CUDA kernels ({a}: {list(first or ())}, {b}: {list(second or ())})",
        kernel=f"kernel.{b}",
        key=key,
        expected="expected the same value in every CUDA kernel: kernelpack compiles them into "
        "one library",
    )


def _replace_skip(spec: KernelSpec, reason: Reason) -> KernelSpec:
    return replace(spec, skip=reason)


def _one_of(prefix: str, known: tuple[str, ...], got: str) -> str:
    close = difflib.get_close_matches(got, list(known), n=1)
    hint = f'did you mean "{close[0]}"? ' if close else ""
    return f"{hint}{prefix} one of {', '.join(known)}"
