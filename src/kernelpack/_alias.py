"""Old import paths kept working: `kernelpack.runtime`, `kernelpack.record`, … are the very
modules of `kernelpack_runtime` (one module object each, so state and patches are shared)."""

from __future__ import annotations

import importlib
import sys

__all__ = ["alias"]


def alias(old: str, new: str) -> None:
    """Make `import old` return the module `new` (imported now)."""
    sys.modules[old] = importlib.import_module(new)
