"""What kernel-builder's CMake makes of a project's kernels in its one extension target.

kernel-builder (`kernel-builder/src/pyproject/templates/`) adds every kernel's sources to one
CMake target and sets each kernel's settings as properties of its source files. Two
consequences that a project may rely on without saying so, which kernelpack reproduces:

- `define_gpu_extension_target` (`utils.cmake`) gives the whole target the include folder
  `csrc` (relative to the project root): the binding includes a kernel's headers from there
  without naming it in any `include`.
- A source listed by two kernels is one source of the target, compiled once: the gencode
  and compile options of both are appended to its properties (the union of their archs, both
  kernels' flags in order, each option once, as CMake de-duplicates a compile's options),
  while its include folders are set, so the last kernel's win.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from packaging.version import Version

from kernelpack.project.manifest import Part

__all__ = ["TARGET_INCLUDE", "target_includes", "target_parts"]

#: The folder below the project root on the include path of every source of the target.
TARGET_INCLUDE = "csrc"


def target_includes(root: Path) -> tuple[Path, ...]:
    """The target's own include folders: `<root>/csrc` when the project has one."""
    folder = root / TARGET_INCLUDE
    return (folder,) if folder.is_dir() else ()


def target_parts(parts: Sequence[Part], root: Path) -> tuple[Part, ...]:
    """The kernels' parts as the target compiles them: shared sources merged, and the
    target's include folders (`target_includes`) after each part's own."""
    own = target_includes(root)
    return tuple(
        Part(**{**vars(part), "include_dirs": (*part.include_dirs, *own)})
        for part in _shared_sources_merged(parts)
    )


def _shared_sources_merged(parts: Sequence[Part]) -> tuple[Part, ...]:
    """`parts` with every source that several of them list moved into one part of its own,
    named after its kernels (`a+b`): the union of their archs and PTX archs, their nvcc and
    C++ flags in order (a flag both give appears once), the last one's include folders, and
    the lowest CUDA floor (CMake compiles the source when any of its kernels is kept).
    Parts left with no source are dropped; with no shared source, `parts` unchanged."""
    owners: dict[Path, tuple[int, ...]] = {}
    for index, part in enumerate(parts):
        for source in part.sources:
            if index not in owners.get(source, ()):
                owners[source] = (*owners.get(source, ()), index)
    groups: dict[tuple[int, ...], list[Path]] = {}
    for source, indices in owners.items():
        if len(indices) > 1:
            groups.setdefault(indices, []).append(source)
    if not groups:
        return tuple(parts)
    shared = {source for sources in groups.values() for source in sources}
    kept = [
        Part(**{**vars(part), "sources": tuple(s for s in part.sources if s not in shared)})
        for part in parts
    ]
    merged = [_merge([parts[i] for i in indices], sources) for indices, sources in groups.items()]
    return tuple(part for part in (*kept, *merged) if part.sources)


def _merge(members: Sequence[Part], sources: Sequence[Path]) -> Part:
    floors = [m.min_cuda for m in members]
    floor: Version | None = None if None in floors else min(f for f in floors if f is not None)
    return Part(
        name="+".join(m.name for m in members),
        sources=tuple(sources),
        arch=tuple(sorted({a for m in members for a in m.arch})),
        ptx=tuple(sorted({a for m in members for a in m.ptx})),
        nvcc_flags=_joined(m.nvcc_flags for m in members),
        cxx_flags=_joined(m.cxx_flags for m in members),
        include_dirs=members[-1].include_dirs,
        min_cuda=floor,
    )


def _joined(lists: Iterable[tuple[str, ...]]) -> tuple[str, ...]:
    """The flags of `lists` in order, each once: CMake de-duplicates a compile's options."""
    joined: list[str] = []
    for flags in lists:
        for flag in flags:
            if flag not in joined:
                joined.append(flag)
    return tuple(joined)
