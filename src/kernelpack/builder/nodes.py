"""The graph's nodes for a plan: each kernel's sources and flags, its parts' compile units
(sources with flags of their own), its generated module init and headers, and the path of
its library in the build folder."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from kernelpack.builder import graph, install, modinit
from kernelpack.builder.flags import kernel_flags, limited_api_hex
from kernelpack.builder.outputs import library_name
from kernelpack.errors import BuildError
from kernelpack.plan import BuildPlan, KernelPlan
from kernelpack.project.filekinds import is_header
from kernelpack_runtime._files import write_text_atomic

__all__ = ["nodes_of", "write_if_changed"]


def nodes_of(plan: BuildPlan, build_dir: Path, root: Path) -> list[graph.GraphKernel]:
    """Each kernel to build as a node of the graph: its flags, its sources (with a generated
    module init where it defines none) and its library in the build folder."""
    nodes = []
    for kernel in plan.to_build:
        headers = _write_headers(kernel, build_dir)
        if headers:
            kernel = replace(kernel, dep_include_dirs=(*headers, *kernel.dep_include_dirs))
        flags = kernel_flags(kernel, plan.toolchain, limited_api=plan.python_floor)
        compiled = [s for s in kernel.spec.sources if not is_header(s)]
        in_parts = {s for part in kernel.spec.parts for s in part.sources}
        units = tuple(
            graph.Unit(
                sources=tuple(s for s in part.part.sources if not is_header(s)),
                flags=kernel_flags(
                    kernel, plan.toolchain, limited_api=plan.python_floor, part=part
                ),
            )
            for part in kernel.parts
        )
        sources = [s for s in compiled if s not in in_parts]
        if not modinit.defines_module_init(compiled):
            sources.append(_write_modinit(kernel, build_dir, plan.python_floor))
        nodes.append(
            graph.GraphKernel(
                name=kernel.name,
                sources=tuple(sources),
                flags=flags,
                library=f"lib/{kernel.name}/{library_name(kernel)}",
                package_dir=plan.manifest.package_dir,
                root=root,
                units=units,
            )
        )
    return nodes


def _write_modinit(kernel: KernelPlan, build_dir: Path, floor: tuple[int, int]) -> Path:
    limited = limited_api_hex(floor) if kernel.spec.abi == "stable" else None
    path = build_dir / "gen" / kernel.name / f"{kernel.spec.module}_init.c"
    write_if_changed(
        path, modinit.source(kernel.name, limited_api=limited, module=kernel.spec.module)
    )
    return path


def _write_headers(kernel: KernelPlan, build_dir: Path) -> tuple[Path, ...]:
    """Write the kernel's generated headers; return their include folder (if any)."""
    if not kernel.spec.generated_headers:
        return ()
    folder = build_dir / "gen" / kernel.name / "include"
    for name, text in kernel.spec.generated_headers.items():
        write_if_changed(folder / name, text)
    return (folder,)


def write_if_changed(path: Path, text: str) -> None:
    """Atomic write that leaves an identical file (and its mtime) alone.

    Whatever the build folder holds at `path` (another encoding, a folder) is replaced, or
    is a one-line `BuildError`.
    """
    if install.read_bytes(path) == text.encode("utf-8"):
        return
    try:
        write_text_atomic(path, text)
    except OSError as exc:
        what = "is a folder" if path.is_dir() else (exc.strerror or str(exc)).lower()
        raise BuildError(f"{path}: cannot write it: {what}") from None
