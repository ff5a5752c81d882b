"""Atomic file writes: a reader sees the old file or the new one, never half of it.

The one helper for temp + rename, shared by the build (libraries, generated sources), the
build record, wheels and sdists, the release and Bazel tools; light enough for the runtime.
Every temporary file is a hidden sibling named `.<name>.<random>` (so a rename never crosses
file systems), removed on any error or interruption, and given the mode a plain new file
would have (`0o666` less the umask), not `mkstemp`'s private `0o600`.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "TEMP_PREFIX",
    "TEMP_SUFFIX",
    "atomic_path",
    "copy_atomic",
    "temp_pattern",
    "write_text_atomic",
]

#: Temporary siblings start with `.<final name>.`; builds and packagers skip and clean them.
TEMP_PREFIX = "."
#: The regular expression of what follows `.<final name>` in a temporary sibling's name:
#: `.` and 8 random characters. This module writes 8 hex digits (`._C.abi3.so.3f9a0c1e`);
#: the pattern also takes `tempfile.mkstemp`'s 8 of `[a-z0-9_]`, as temporaries of writers
#: built on it look, so a build cleans up and never ships either.
TEMP_SUFFIX = r"\.[a-z0-9_]{8}"
_RANDOM_BYTES = 4


#: What `open()` asks for a new file; the process umask takes away the rest (0644 usually).
_NEW_FILE_MODE = 0o666


def _create_sibling(destination: Path) -> Path:
    """A new, empty, exclusively created temporary sibling of `destination`.

    Created with `_NEW_FILE_MODE`, so the kernel applies the umask as for any new file:
    no need to read the process-wide umask (which cannot be read without setting it, a race
    with other threads creating files).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        random = os.urandom(_RANDOM_BYTES).hex()
        temp = destination.parent / f"{TEMP_PREFIX}{destination.name}.{random}"
        try:
            os.close(os.open(temp, flags, _NEW_FILE_MODE))
        except FileExistsError:
            continue
        return temp


@contextmanager
def atomic_path(destination: Path, *, mode: int | None = None) -> Iterator[Path]:
    """Yield a temporary sibling of `destination` to write; on success it replaces
    `destination` (`os.replace`), on any exception it is removed and `destination` is left
    as it was. `mode` (default `0o666` less the umask) is set before the rename."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    temp = _create_sibling(destination)
    try:
        yield temp
        if mode is not None:
            os.chmod(temp, mode)
        os.replace(temp, destination)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def temp_pattern(name: str) -> re.Pattern[str]:
    """The names of the temporary siblings an atomic write of a file named `name` goes
    through (`name` may be a regular expression: `temp_pattern(r"_C(\\.[^/]*)?\\.so")`)."""
    return re.compile(re.escape(TEMP_PREFIX) + name + TEMP_SUFFIX)


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` atomically."""
    with atomic_path(path) as temp:
        temp.write_text(text, encoding="utf-8")


def copy_atomic(source: Path, destination: Path) -> None:
    """Copy `source` (with its times and mode) to `destination` atomically."""
    with atomic_path(destination, mode=source.stat().st_mode & 0o7777) as temp:
        shutil.copy2(source, temp)
