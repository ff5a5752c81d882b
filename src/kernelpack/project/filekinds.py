"""What kind of file a path in a kernel project is: the one owner of these lists.

Used by the build (which files a kernel's source hash covers), the wheel (what ships: never
native sources or headers, never build outputs), the sdist (everything but build outputs
and caches) and the Bazel generator (what is not the Python layer).
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "BUILD_OUTPUT_DIRS",
    "BUILD_OUTPUT_SUFFIXES",
    "CACHE_DIRS",
    "HEADER_SUFFIXES",
    "NATIVE_DIRS",
    "NATIVE_SUFFIXES",
    "SOURCE_SUFFIXES",
    "is_header",
    "is_native",
]

#: Translation units nvcc or the host compilers compile.
SOURCE_SUFFIXES = frozenset({".cu", ".c", ".cc", ".cpp", ".cxx"})

#: Files only `#include`d: they decide rebuilds (through the depfiles) and the source hash,
#: and never ship in a wheel. `.inc`/`.tcc`/`.inl` are template bodies split off headers.
HEADER_SUFFIXES = frozenset({".h", ".hh", ".hpp", ".hxx", ".cuh", ".inl", ".inc", ".tcc"})

#: Sources and headers: what a wheel never holds and an sdist always does.
NATIVE_SUFFIXES = SOURCE_SUFFIXES | HEADER_SUFFIXES

#: Folders of native code by convention (a kernel's `csrc/`): not the Python layer.
NATIVE_DIRS = frozenset({"csrc"})

#: What a compile or an install leaves behind: shipped only as the wheel's own libraries.
BUILD_OUTPUT_SUFFIXES = frozenset({".so", ".o", ".pyc", ".pyo", ".whl"})

#: Folders that hold build outputs, wheels or environments, at the project root only: deeper
#: down a folder of these names is the project's own (e.g. a subpackage named `build`).
BUILD_OUTPUT_DIRS = frozenset({"build", "dist", ".venv", "venv"})

#: Tool caches and version-control folders, at any depth.
CACHE_DIRS = frozenset(
    {".git", ".hg", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", "node_modules"}
)


def is_header(path: Path) -> bool:
    """Whether `path` is a header (see `HEADER_SUFFIXES`)."""
    return path.suffix in HEADER_SUFFIXES


def is_native(path: Path) -> bool:
    """Whether `path` is a native source or header (never shipped in a wheel)."""
    return path.suffix in NATIVE_SUFFIXES
