"""A kernel-builder project (the model, whatever its format) as a kernelpack `Manifest`.

kernel-builder builds ONE extension per project and backend, `_<name>_<hash>`, holding
every kernel of that backend plus the `[torch]` binding sources, and registers its ops in the
namespace of the same name. kernelpack maps that onto its own model:

- the package is `torch-ext/<name>/` (`-` in the name becomes `_`), unchanged;
- the CUDA library is the kernelpack kernel `_ops` (the CPU one `_ops_cpu`): its sources are
  every kernel's `src` plus `[torch].src`; each kernel is a `Part` of it, compiled with its
  own `cuda-capabilities` (kernel-builder's loose intersection with its default set),
  `cuda-flags`, `cxx-flags`, `include` and `cuda-minver`, then linked into the one library;
- each kernel of another backend (`metal`, `rocm`, `xpu`) is listed and skipped
  (`platform-excluded`), so the build record says why it is not there;
- `_ops.py` is generated, and `registration.h` where the project ships none;
- compiles follow kernel-builder's rules (`CompileRules`), not BuildExtension's.

Paths are relative to the folder of `build.toml` and must stay inside it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from packaging.version import Version

from kernelpack.project._toml import (
    ANY_PLATFORM,
    Table,
    display_path,
    is_inside,
    path_too_long,
    quote,
)
from kernelpack.project.buildtoml import capabilities
from kernelpack.project.buildtoml import target as cmake_target
from kernelpack.project.buildtoml._tables import one_of
from kernelpack.project.buildtoml.generated import ops_py, registration_h
from kernelpack.project.buildtoml.model import Kernel, Noarch, Project, Torch
from kernelpack.project.dependencies import KERNEL_BUILDER_DEPS, OTHER_BACKEND_DEPS
from kernelpack.project.manifest import KernelSpec, Manifest, Part
from kernelpack.project.settings import Settings
from kernelpack_runtime.arch import Arch, InvalidArch
from kernelpack_runtime.reason import Reason

__all__ = [
    "CPU_KERNEL",
    "DEPENDS",
    "KERNEL",
    "PYTHON_DEPENDS",
    "manifest",
    "requirements",
]

#: The kernelpack kernel that holds a `build.toml` project's CUDA library.
KERNEL = "_ops"
#: The kernelpack kernel that holds its CPU library (the `backend = "cpu"` kernels).
CPU_KERNEL = "_ops_cpu"

#: kernel-builder `depends` names of CUDA and CPU kernels -> kernelpack's dependency name
#: (None: nothing to add, torch's headers are always there). `cutlass_X_Y` is CUTLASS X.Y,
#: passed on as it is (`kernelpack.project.dependencies` owns the names and releases).
DEPENDS: Mapping[str, str | None] = {
    name: None if name == "torch" else name for name in sorted(KERNEL_BUILDER_DEPS)
}

#: kernel-builder's Python dependency names -> the distribution a wheel requires, for every
#: backend and for the CUDA build (its `python_dependencies.json`).
PYTHON_DEPENDS: Mapping[str, str] = {
    "einops": "einops",
    "helion": "helion",
    "tvm-ffi": "apache-tvm-ffi",
}
_CUDA_PYTHON_DEPENDS: Mapping[str, str] = {"nvidia-cutlass-dsl": "nvidia-cutlass-dsl"}

_COMPILED_BACKENDS = ("cuda", "cpu")


def requirements(project: Project) -> tuple[str, ...]:
    """The distributions the project's wheel requires for its Python dependencies (general
    ones, then the CUDA build's); an unknown name is a one-line error."""
    table = Table(display_path(project.path), "general", {})
    found = [
        _requirement(table, "python-depends", n, PYTHON_DEPENDS) for n in project.python_depends
    ]
    cuda = Table(table.path, "general.cuda", {})
    known = {**PYTHON_DEPENDS, **_CUDA_PYTHON_DEPENDS}
    found += [_requirement(cuda, "python-depends", n, known) for n in project.cuda_python_depends]
    return tuple(dict.fromkeys(found))


def _requirement(table: Table, key: str, name: str, known: Mapping[str, str]) -> str:
    if name not in known:
        raise table.error(
            key, f"unknown dependency {quote(name)}", one_of("expected", tuple(known), name)
        )
    return known[name]


def manifest(
    project: Project, settings: Settings, *, allow_missing_sources: bool = False
) -> Manifest:
    """The kernelpack manifest of `project`; raise `ManifestError` (one line) on a problem."""
    return _Translation(project, settings, allow_missing_sources).manifest()


class _Translation:
    def __init__(self, project: Project, settings: Settings, allow_missing: bool) -> None:
        self.project = project
        self.settings = settings
        self.allow_missing = allow_missing
        self.shown = display_path(project.path)
        self.root = project.root.resolve()
        self.missing: list[str] = []

    def table(self, name: str | None) -> Table:
        return Table(self.shown, name, {})

    def manifest(self) -> Manifest:
        project = self.project
        requirements(project)  # unknown Python dependency names are errors here too
        if not project.package_dir.is_dir():
            raise self.table("general").error(
                "name",
                f"the package folder {display_path(project.package_dir)} does not exist",
                f"expected the Python package in torch-ext/{project.python_name}/",
            )
        notes = (project.note,) if project.note else ()
        if isinstance(project.framework, Noarch):
            if project.kernels:
                raise self.table(None).error("kernel", "is not allowed with [torch-noarch]", None)
            return Manifest(
                path=project.path,
                package=project.python_name,
                package_dir=project.package_dir,
                kernels=(),
                generated={"_ops.py": ops_py(project.namespace, compiled=False)},
                notes=notes,
            )
        torch = project.framework
        torch_sources = self.paths("torch", "src", torch.src)
        torch_includes = self.folders("torch", "include", torch.include)
        by_backend: dict[str, list[Kernel]] = {"cuda": [], "cpu": []}
        skipped: list[KernelSpec] = []
        for kernel in project.kernels:
            if kernel.name in (KERNEL, CPU_KERNEL):
                raise self.table(kernel.table).error(
                    None,
                    f"the name {kernel.name} is kernelpack's for a library",
                    "expected another kernel name",
                )
            if kernel.backend in _COMPILED_BACKENDS and kernel.backend in project.backends:
                by_backend[kernel.backend].append(kernel)
                continue
            self.paths(kernel.table, "src", kernel.src, check=False)
            why = (
                f'backend = "{kernel.backend}": kernelpack builds the CUDA and CPU kernels '
                "of a build.toml only"
                if kernel.backend not in _COMPILED_BACKENDS
                else f'backend = "{kernel.backend}" is not in [general].backends'
            )
            name = kernel.name.replace("-", "_")  # a kernelpack kernel name is an identifier
            skipped.append(self.skipped(name, Reason("platform-excluded", why), torch))
        libraries: list[KernelSpec] = []
        cuda, cpu = by_backend["cuda"], by_backend["cpu"]
        if cuda or not cpu:
            library = self.library("cuda", cuda, torch, torch_sources, torch_includes)
            if not cuda:
                reason = Reason("platform-excluded", "build.toml declares no CUDA kernel to build")
                library = replace(library, skip=reason)
            libraries.append(library)
        if cpu:
            libraries.append(self.library("cpu", cpu, torch, torch_sources, torch_includes))
        return Manifest(
            path=project.path,
            package=project.python_name,
            package_dir=project.package_dir,
            kernels=(*libraries, *skipped),
            generated={
                "_ops.py": ops_py(project.namespace, kernels=tuple(s.name for s in libraries))
            },
            notes=notes,
        )

    def skipped(self, name: str, reason: Reason, torch: Torch) -> KernelSpec:
        target = torch.stable_abi.get("cuda")
        return KernelSpec(
            name=name,
            folder=self.project.package_dir,
            namespace=self.project.namespace,
            sources=(),
            arch={ANY_PLATFORM: ()},
            abi="stable" if target is not None else "torch",
            stable_target=target or Version("2.10"),
            skip=reason,
        )

    def library(
        self,
        backend: str,
        kernels: list[Kernel],
        torch: Torch,
        torch_sources: tuple[Path, ...],
        torch_includes: tuple[Path, ...],
    ) -> KernelSpec:
        """The one kernelpack kernel holding the backend's kernels (each a `Part`) and the
        binding; the CPU library's module and namespace end in `_cpu`, so it loads beside
        the CUDA one."""
        cpu = backend == "cpu"
        root = self.project.root
        parts = cmake_target.target_parts([self.part(k, cpu=cpu) for k in kernels], root)
        sources = dict.fromkeys(torch_sources)
        for part in parts:
            sources.update(dict.fromkeys(part.sources))
        depends: dict[str, None] = {}
        for kernel in kernels:
            depends.update(dict.fromkeys(self.depends(kernel)))
        archs: dict[Arch, None] = {}
        for part in parts:
            archs.update(dict.fromkeys(part.arch))
        shipped = (
            any(p.name == "registration.h" for p in sources)
            or (self.project.root / "torch-ext" / "registration.h").is_file()
        )
        missing = f"{self.shown}: {self.missing[0]}" if self.missing else None
        target = torch.stable_abi.get(backend)
        module = self.project.namespace + ("_cpu" if cpu else "")
        names = ", ".join(k.name for k in kernels) or "none"
        min_cuda = self.project.cuda_minver
        return KernelSpec(
            name=CPU_KERNEL if cpu else KERNEL,
            folder=self.project.package_dir,
            namespace=module,
            sources=() if missing else tuple(sources),
            arch={ANY_PLATFORM: () if cpu else tuple(sorted(archs))},
            abi="stable" if target is not None else "torch",
            backend="cpu" if cpu else "cuda",
            description=(
                f"kernel-builder project {self.project.name} ({backend.upper()} kernels: {names})"
            ),
            include_dirs=(*torch_includes, *cmake_target.target_includes(root)),
            stable_target=target or Version("2.10"),
            ptx=any(part.ptx for part in parts),
            min_cuda=None if cpu else min_cuda,
            depends=tuple(depends),
            cxx_flags=torch.cxx_flags,
            defines={"CPU_KERNEL": "1"} if cpu else {"CUDA_KERNEL": "1", "USE_CUDA": "1"},
            missing_sources=missing,
            module=module,
            max_cuda=None if cpu else self.project.cuda_maxver,
            min_torch=torch.minver,
            max_torch=torch.maxver,
            loose_archs=True,
            generated_headers={} if shipped else {"registration.h": registration_h()},
            parts=() if missing else parts,
            compile_rules="kernel-builder",
        )

    def part(self, kernel: Kernel, *, cpu: bool) -> Part:
        """One kernel's sources and settings; its archs are kernel-builder's (its capabilities
        loosely intersected with the default set, or the default set with its PTX)."""
        sources = self.paths(kernel.table, "src", kernel.src)
        includes = self.folders(kernel.table, "include", kernel.include)
        if cpu:
            return Part(kernel.name, sources, cxx_flags=kernel.cxx_flags, include_dirs=includes)
        defaults = capabilities.default_capabilities(None)
        chosen = defaults
        if kernel.cuda_capabilities is not None:
            chosen = capabilities.loose_intersection(
                kernel.cuda_capabilities, capabilities.without_ptx(defaults)
            )
            if not chosen:
                raise self.table(kernel.table).error(
                    "cuda-capabilities",
                    f"none of {list(kernel.cuda_capabilities)} is built with kernel-builder's "
                    f"capabilities ({', '.join(capabilities.without_ptx(defaults))})",
                    "expected at least one of them, or a lower capability of the same major",
                )
        if self.settings.arch is not None and kernel.cuda_capabilities is None:
            # [tool.kernelpack] arch: the project's default for kernels that list none.
            archs = self.settings.arch.get(ANY_PLATFORM) or next(iter(self.settings.arch.values()))
            return self.cuda_part(kernel, sources, includes, tuple(archs), ())
        try:
            archs = tuple(Arch.parse(c.removesuffix("+PTX")) for c in chosen)
        except InvalidArch as exc:
            raise self.table(kernel.table).error("cuda-capabilities", str(exc)) from None
        ptx = tuple(a for a, c in zip(archs, chosen, strict=True) if c.endswith("+PTX"))
        return self.cuda_part(kernel, sources, includes, archs, ptx)

    def cuda_part(
        self,
        kernel: Kernel,
        sources: tuple[Path, ...],
        includes: tuple[Path, ...],
        archs: tuple[Arch, ...],
        ptx: tuple[Arch, ...],
    ) -> Part:
        return Part(
            kernel.name,
            sources,
            arch=tuple(sorted(set(archs))),
            ptx=ptx,
            nvcc_flags=kernel.cuda_flags,
            cxx_flags=kernel.cxx_flags,
            include_dirs=includes,
            min_cuda=kernel.cuda_minver,
        )

    def depends(self, kernel: Kernel) -> tuple[str, ...]:
        table = self.table(kernel.table)
        names: list[str] = []
        for dep in kernel.depends:
            if dep in self.settings.deps:
                names.append(dep)
                continue
            if dep in OTHER_BACKEND_DEPS:
                raise table.error(
                    "depends",
                    f'"{dep}" is a dependency of another backend than {kernel.backend.upper()}',
                    "expected torch or cutlass_X_Y",
                )
            if dep not in DEPENDS:
                raise table.error(
                    "depends",
                    f'unknown dependency "{dep}"',
                    one_of("expected", tuple(sorted(DEPENDS)), dep)
                    + " or a name in [tool.kernelpack.deps]",
                )
            mapped = DEPENDS[dep]
            if mapped is not None:
                names.append(mapped)
        return tuple(dict.fromkeys(names))

    # -- paths --------------------------------------------------------------------------------

    def paths(
        self, table: str, key: str, entries: tuple[str, ...], *, check: bool = True
    ) -> tuple[Path, ...]:
        found: dict[Path, None] = {}
        for entry in entries:
            path = self.inside(table, key, entry)
            if not check:
                continue
            if not path.exists():
                if not self.allow_missing:
                    raise self.table(table).error(
                        key, f'"{entry}" does not exist', "expected files relative to build.toml"
                    )
                self.missing.append(f'[{table}].{key}: "{entry}" does not exist')
            elif not path.is_file():
                raise self.table(table).error(
                    key, f'"{entry}" is not a file', "expected a source file"
                )
            found[path] = None
        return tuple(found)

    def folders(self, table: str, key: str, entries: tuple[str, ...]) -> tuple[Path, ...]:
        found: dict[Path, None] = {}
        for entry in entries:
            path = self.inside(table, key, entry)
            if not path.is_dir():
                raise self.table(table).error(
                    key, f'"{entry}" is not a folder', "expected folders relative to build.toml"
                )
            found[path] = None
        return tuple(found)

    def inside(self, table: str, key: str, entry: str) -> Path:
        """`entry` resolved against the project root; raise when it leaves the project."""
        error = self.table(table).error
        too_long = path_too_long(entry)
        if too_long is not None:
            raise error(key, f"{quote(entry)} {too_long}", "expected a shorter path")
        if Path(entry).is_absolute() or entry.startswith("~") or re.match(r"[A-Za-z]:", entry):
            raise error(
                key, f'"{entry}" is an absolute path', "expected a path relative to build.toml"
            )
        path = Path(os.path.normpath(self.project.root / entry))
        if not is_inside(path, self.project.root) or not is_inside(path.resolve(), self.root):
            raise error(
                key,
                f'"{entry}" points outside the project',
                f"expected a path inside {display_path(self.project.root)}",
            )
        return path
