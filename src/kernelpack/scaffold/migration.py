"""Moving a kernel-builder project (`build.toml`) to kernelpack's own layout, for good.

`plan()` computes every file the move writes, without writing; `Migration.write()` writes
them, each atomically, after checking that none exists yet (unless `force`). The result is
the layout `kernels.toml` describes: the package stays `torch-ext/<name>/`; its one kernel
`_ops` (the module kernel-builder's generated `_ops.py` was) becomes a subpackage
`torch-ext/<name>/_ops/` holding a copy of every CUDA source under `csrc/` (paths below the
project root kept) and an `__init__.py` with the same `ops` and `add_op_namespace_prefix`.
The library keeps the namespace the `build.toml` build gives it, so both builds register the
same ops. `pyproject.toml` names kernelpack's backend and the manifest.

What `kernels.toml` cannot say is reported, not silently dropped: kernels of other backends,
`[general.cuda].maxver`.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from kernelpack.errors import UsageError
from kernelpack.project import buildtoml
from kernelpack.project._toml import display_path, is_inside
from kernelpack.project.filekinds import is_header
from kernelpack.project.locate import MANIFEST_NAME, Project
from kernelpack.project.manifest import ANY_PLATFORM, KernelSpec
from kernelpack.syntax import toml
from kernelpack_runtime._files import atomic_path, write_text_atomic

__all__ = ["Migration", "plan"]

# What the migrated package needs at run time besides its own [project] dependencies.
_RUNTIME_DEPENDENCIES = ("torch", "kernelpack-runtime")


@dataclass(frozen=True)
class Migration:
    """Every file a migration writes or copies, and what it could not carry over."""

    root: Path
    texts: dict[Path, str] = field(default_factory=dict)
    """Absolute path -> text to write."""
    copies: dict[Path, Path] = field(default_factory=dict)
    """Absolute destination -> source file to copy."""
    notes: tuple[str, ...] = ()
    """What `kernels.toml` cannot express (kernels of other backends, `maxver`)."""
    replaces: tuple[Path, ...] = ()
    """Generated files of an earlier build.toml build that the new layout shadows."""

    @property
    def files(self) -> tuple[Path, ...]:
        return tuple(sorted({*self.texts, *self.copies}))

    def conflicts(self) -> tuple[Path, ...]:
        """The files this migration would overwrite (or shadow)."""
        return tuple(p for p in (*self.files, *self.replaces) if p.exists() or p.is_symlink())

    def check_links(self) -> None:
        """`UsageError` naming the first symlink that leads out of the project: a file to copy
        whose target lies outside (its content would ship in the next sdist), or a folder on
        the way to a file to write (the file would land outside)."""
        root = self.root.resolve()
        for source in self.copies.values():
            target = source.resolve()
            if not is_inside(target, root):
                raise UsageError(
                    f"{display_path(source)}: a symlink to {target}, outside the project "
                    f"{display_path(self.root)}; kernelpack migrate copies only the project's "
                    "own files"
                )
        for path in (*self.files, *self.replaces):
            folder = path.parent
            while not folder.exists() and folder != folder.parent:
                folder = folder.parent
            if not is_inside(folder.resolve(), root):
                raise UsageError(
                    f"{display_path(folder)}: leads to {folder.resolve()}, outside the project "
                    f"{display_path(self.root)}; kernelpack migrate writes only inside it"
                )

    def write(self, *, force: bool = False) -> tuple[Path, ...]:
        """Write every file; without `force`, raise `UsageError` (nothing written) when any
        exists, or (even with `force`) when a symlink leads out of the project
        (`check_links`). Returns the files written."""
        self.check_links()
        conflicts = self.conflicts()
        if conflicts and not force:
            more = f" (and {len(conflicts) - 1} more)" if len(conflicts) > 1 else ""
            raise UsageError(
                f"{display_path(conflicts[0])} exists{more}; kernelpack migrate writes only new "
                "files: pass --force to overwrite"
            )
        for path in self.replaces:
            path.unlink(missing_ok=True)
        for destination, source in self.copies.items():
            with atomic_path(destination) as temp:
                shutil.copyfile(source, temp)
        for path, text in self.texts.items():
            write_text_atomic(path, text)
        return self.files


def plan(project: Project) -> Migration:
    """The migration of a `build.toml` project (`Project.is_build_toml`)."""
    if not project.is_build_toml:
        raise UsageError(
            f"{display_path(project.manifest_path)}: already a {MANIFEST_NAME} project; "
            "kernelpack migrate moves a kernel-builder project (build.toml)"
        )
    facts = buildtoml.read(project.manifest_path)
    manifest = project.load_manifest()
    if buildtoml.KERNEL not in manifest.names:
        raise UsageError(
            f"{display_path(project.manifest_path)}: declares no CUDA kernel; kernelpack "
            "migrate moves a project's CUDA library (build its CPU kernels from build.toml)"
        )
    library = _flattened(manifest.kernel(buildtoml.KERNEL))
    root = project.root
    kernel_dir = project.package_dir / buildtoml.KERNEL
    csrc = kernel_dir / "csrc"

    copies: dict[Path, Path] = {}
    for source in _files_to_copy(library):
        copies[csrc / source.relative_to(root)] = source
    for folder in library.include_dirs:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and path.name != "registration.h":
                copies[csrc / path.relative_to(root)] = path

    notes = [
        f"[kernel.{spec.name}] is not carried over ({spec.skip.message})"
        for spec in manifest.kernels
        if spec.skip is not None and spec.name != buildtoml.KERNEL
    ]
    if buildtoml.CPU_KERNEL in manifest.names:
        cpu = manifest.kernel(buildtoml.CPU_KERNEL)
        notes.append(
            f"the CPU library ({cpu.description}) is not carried over; add a kernel with "
            'backend = "cpu" to kernels.toml for it'
        )
    if (
        len({(p.arch, p.nvcc_flags, p.cxx_flags) for p in manifest.kernel(buildtoml.KERNEL).parts})
        > 1
    ):
        notes.append(
            "the kernels' own cuda-capabilities and flags are merged: kernels.toml compiles "
            "one library with one set (the union of the archs and of the flags)"
        )
    if library.max_cuda is not None:
        notes.append(
            f"[general.cuda].maxver = {library.max_cuda} has no kernels.toml key and is dropped"
        )
    texts = {
        project.package_dir / MANIFEST_NAME: _kernels_toml(library, root),
        kernel_dir / "__init__.py": _ops_init(facts.name),
        csrc / "include" / "registration.h": _registration_h(),
    }
    texts[root / "pyproject.toml"] = _pyproject(project, facts)
    return Migration(
        root=root,
        texts=texts,
        copies=copies,
        notes=tuple(notes),
        replaces=(project.package_dir / "_ops.py",),
    )


#: What kernel-builder's compile rules add to a library's flags, written out for kernels.toml
#: (which follows kernelpack's rules): `-fno-gnu-unique` keeps template statics of two loaded
#: kernels apart; its nvcc keeps half/bfloat16 operators and conversions and defines
#: ENABLE_FP8 (torch's BuildExtension flags turn them off: `-U` undoes that).
_KERNEL_BUILDER_NVCC = (
    "-Xcompiler=-fno-gnu-unique",
    "-U__CUDA_NO_HALF_OPERATORS__",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-U__CUDA_NO_HALF2_OPERATORS__",
    "-DENABLE_FP8",
)


def _flattened(library: KernelSpec) -> KernelSpec:
    """`library` with its parts' settings merged into its own (kernels.toml has one set per
    kernel) and kernel-builder's compile rules written out as flags."""
    parts = library.parts
    includes = {**dict.fromkeys(library.include_dirs)}
    nvcc: dict[str, None] = dict.fromkeys(_KERNEL_BUILDER_NVCC)
    cxx: dict[str, None] = dict.fromkeys(("-fno-gnu-unique", *library.cxx_flags))
    for part in parts:
        includes.update(dict.fromkeys(part.include_dirs))
        nvcc.update(dict.fromkeys(part.nvcc_flags))
        cxx.update(dict.fromkeys(part.cxx_flags))
    floors = [p.min_cuda for p in parts if p.min_cuda is not None]
    min_cuda = max([*floors, *([library.min_cuda] if library.min_cuda else [])], default=None)
    return replace(
        library,
        include_dirs=tuple(includes),
        nvcc_flags=tuple(nvcc),
        cxx_flags=tuple(cxx),
        min_cuda=min_cuda,
        parts=(),
    )


def _files_to_copy(library: KernelSpec) -> Iterable[Path]:
    """The library's sources plus the headers next to them (sources include siblings that
    `src` need not list); `registration.h` is replaced by kernelpack's own."""
    seen: dict[Path, None] = {}
    for source in library.sources:
        seen[source] = None
        for sibling in sorted(source.parent.iterdir()):
            if is_header(sibling) and sibling.is_file():
                seen[sibling] = None
    return [p for p in seen if p.name != "registration.h"]


def _kernels_toml(spec: KernelSpec, root: Path) -> str:
    def moved(path: Path) -> str:
        return (Path("csrc") / path.relative_to(root)).as_posix()

    archs = spec.arch.get(ANY_PLATFORM)
    if archs is None:  # a per-platform default from [tool.kernelpack]
        arch = (
            "{ "
            + ", ".join(
                f"{toml.key(platform)} = {toml.array(map(str, values))}"
                for platform, values in spec.arch.items()
            )
            + " }"
        )
    else:
        arch = toml.array(map(str, archs))
    lines = [
        "# Migrated from build.toml by `kernelpack migrate`. The kernel `_ops` is the module",
        "# kernel-builder's generated _ops.py was; its namespace is the one the build.toml",
        "# build used, so both register the same ops.",
        "",
        f"[{toml.key(spec.name)}]",
        f"description = {toml.string(spec.description)}",
        f"ops = {toml.string(spec.namespace)}",
        f"sources = {toml.array(moved(p) for p in spec.sources)}",
        f"include-dirs = {toml.array(['csrc/include', *(moved(p) for p in spec.include_dirs)])}",
        f"arch = {arch}",
    ]
    if spec.ptx:
        lines.append("ptx = true")
    if spec.abi == "stable":
        target = spec.stable_target
        lines += ['abi = "stable"', f'stable-target = "{target.major}.{target.minor}"']
    if spec.min_cuda is not None:
        lines.append(f'min-cuda = "{spec.min_cuda}"')
    if spec.depends:
        lines.append(f"depends = {toml.array(spec.depends)}")
    lines += [
        f"nvcc-flags = {toml.array(spec.nvcc_flags)}",
        f"cxx-flags = {toml.array(spec.cxx_flags)}",
        f"defines = {toml.inline_table(spec.defines)}",
    ]
    return "\n".join(lines) + "\n"


def _ops_init(name: str) -> str:
    return f'''\
"""The ops of {name}: what kernel-builder's generated `_ops.py` gave, from kernelpack's
build record (`ops`, `add_op_namespace_prefix`)."""

import torch

from kernelpack_runtime import ops_namespace

from . import _C  # noqa: F401  # loading the library registers the ops

_NAMESPACE = ops_namespace(__name__)

ops = getattr(torch.ops, _NAMESPACE)


def add_op_namespace_prefix(op_name: str) -> str:
    """The op's name in this build's namespace: "<namespace>::<op_name>"."""
    return f"{{_NAMESPACE}}::{{op_name}}"
'''


def _registration_h() -> str:
    return """\
// kernel-builder's registration macros for a kernelpack build (written by kernelpack migrate).
// kernelpack names the module _C (TORCH_EXTENSION_NAME) and gives the ops their namespace in
// KERNELPACK_NAMESPACE: the *_EXPAND macros register there, whatever NAME they are given.
#pragma once

#include <Python.h>

#define _CONCAT(A, B) A##B
#define CONCAT(A, B) _CONCAT(A, B)

#define _STRINGIFY(A) #A
#define STRINGIFY(A) _STRINGIFY(A)

#define KP_MIGRATED_CALL2(macro, a, b) macro(a, b)
#define KP_MIGRATED_CALL3(macro, a, b, c) macro(a, b, c)

#define TORCH_LIBRARY_EXPAND(NAME, MODULE) \\
  KP_MIGRATED_CALL2(TORCH_LIBRARY, KERNELPACK_NAMESPACE, MODULE)
#define TORCH_LIBRARY_FRAGMENT_EXPAND(NAME, MODULE) \\
  KP_MIGRATED_CALL2(TORCH_LIBRARY_FRAGMENT, KERNELPACK_NAMESPACE, MODULE)
#define TORCH_LIBRARY_IMPL_EXPAND(NAME, DEVICE, MODULE) \\
  KP_MIGRATED_CALL3(TORCH_LIBRARY_IMPL, KERNELPACK_NAMESPACE, DEVICE, MODULE)

#define STABLE_TORCH_LIBRARY_EXPAND(NAME, MODULE) \\
  KP_MIGRATED_CALL2(STABLE_TORCH_LIBRARY, KERNELPACK_NAMESPACE, MODULE)
#define STABLE_TORCH_LIBRARY_FRAGMENT_EXPAND(NAME, MODULE) \\
  KP_MIGRATED_CALL2(STABLE_TORCH_LIBRARY_FRAGMENT, KERNELPACK_NAMESPACE, MODULE)
#define STABLE_TORCH_LIBRARY_IMPL_EXPAND(NAME, DEVICE, MODULE) \\
  KP_MIGRATED_CALL3(STABLE_TORCH_LIBRARY_IMPL, KERNELPACK_NAMESPACE, DEVICE, MODULE)

#define REGISTER_EXTENSION(NAME)                                                  \\
  PyMODINIT_FUNC CONCAT(PyInit_, NAME)() {                                        \\
    static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, STRINGIFY(NAME),   \\
                                        nullptr, 0, nullptr};                     \\
    return PyModule_Create(&module);                                              \\
  }
"""


def _pyproject(project: Project, facts: buildtoml.Project) -> str:
    manifest = (project.package_dir / MANIFEST_NAME).relative_to(project.root).as_posix()
    lines = [
        "# Written by `kernelpack migrate` from build.toml.",
        "[build-system]",
        'requires = ["kernelpack", "ninja>=1.11"]',
        'build-backend = "kernelpack.backend"',
        "",
        "[project]",
        f"name = {toml.string(facts.name)}",
        f"version = {toml.string(project.version)}",
    ]
    if facts.license is not None:
        lines.append(f"license = {toml.string(facts.license)}")
    lines += [
        f"dependencies = {toml.array(_RUNTIME_DEPENDENCIES)}",
        "",
        "[tool.kernelpack]",
        f"manifest = {toml.string(manifest)}",
    ]
    return "\n".join(lines) + "\n"
