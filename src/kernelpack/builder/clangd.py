"""Where clangd finds the build's `compile_commands.json` without being told.

clangd looks for `compile_commands.json` in each folder above the file it opens and in a
`build/` subfolder of each. The build writes the database into its own folder
(`<root>/build/kernelpack/`), one level deeper, so `link()` adds
`<root>/build/compile_commands.json`, a relative symlink to it. A file of that name that is
not such a link (another tool's database) is never replaced.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["link"]

_NAME = "compile_commands.json"


def link(build_dir: Path) -> Path | None:
    """Link `build_dir`'s database from its parent folder when that folder is a `build/`
    clangd searches; the link when this call made it, None when there was nothing to do."""
    parent = build_dir.parent
    if parent.name != "build":
        return None
    target = Path(build_dir.name) / _NAME
    where = parent / _NAME
    if where.is_symlink() and Path(os.readlink(where)) == target:
        return None
    if where.exists() or where.is_symlink():
        return None  # someone else's file: theirs to keep
    try:
        where.symlink_to(target)
    except OSError:
        return None  # a folder that takes no symlinks: clangd can still be pointed at it
    return where
