"""The benchmarks' own modules, for the tests that check their logic without a GPU.

`benchmarks/` is not a package: each benchmark imports its neighbours as top-level modules
(``import roofline``), so a test imports one with that folder on `sys.path` for the import.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["BENCHMARKS", "import_benchmark"]

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def import_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as a module (`BENCHMARKS` on `sys.path` while it imports)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))
