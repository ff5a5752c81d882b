"""Whether a path stays inside a folder once symlinks are resolved (the runtime opens only
files inside the package)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["inside"]


def inside(path: Path, folder: Path) -> bool:
    """Whether `path`, symlinks resolved, lies in `folder` (symlinks resolved too)."""
    try:
        Path(os.path.realpath(path)).relative_to(os.path.realpath(folder))
    except ValueError:
        return False
    return True
