"""Atomic file writes: a reader sees the old file or the new one, never half of it.

Shared by the build (libraries, generated sources), the build record and the release tools;
light enough for the runtime.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["copy_atomic", "write_text_atomic"]


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder and `os.replace`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def copy_atomic(source: Path, destination: Path) -> None:
    """Copy `source` (with its times and mode) to `destination` the same way."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{destination.name}.", dir=destination.parent)
    os.close(fd)
    try:
        shutil.copy2(source, tmp)
        os.replace(tmp, destination)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
