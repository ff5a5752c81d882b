"""Atomic installs: copy to a temporary name in the destination folder, then `os.replace`.

A reader (or a crash, or Ctrl-C) sees the old file or the new one, never half of either.
An unchanged file (same size and mtime as its source) is left alone, which keeps a no-op
build from touching the package.
"""

from __future__ import annotations

from pathlib import Path

from kernelpack_runtime._files import copy_atomic

__all__ = ["install_file"]


def install_file(source: Path, destination: Path) -> bool:
    """Copy `source` to `destination` atomically; return False when it was already there."""
    if _same(source, destination):
        return False
    copy_atomic(source, destination)
    return True


def _same(source: Path, destination: Path) -> bool:
    try:
        a, b = source.stat(), destination.stat()
    except FileNotFoundError:
        return False
    return a.st_size == b.st_size and a.st_mtime_ns == b.st_mtime_ns
