"""The running torch: its version and CUDA version, read without initialising CUDA.

When torch is already imported its attributes are used; otherwise `torch/version.py` is read
as text, so asking costs a file read rather than a torch import.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TorchFacts", "TorchReader", "read_torch"]


@dataclass(frozen=True)
class TorchFacts:
    """The torch this process would import; `version` is None when torch is not installed."""

    version: str | None
    """`torch.__version__`, e.g. "2.14.1+cu130"."""
    cuda: str | None
    """`torch.version.cuda`, e.g. "13.0"; None for a CPU-only build."""

    @property
    def installed(self) -> bool:
        return self.version is not None

    def describe(self) -> str:
        """E.g. "2.14.1+cu130 (CUDA 13.0)" or "2.13.0+cpu (CPU-only)"."""
        if self.version is None:
            return "no torch"
        return f"{self.version} ({f'CUDA {self.cuda}' if self.cuda else 'CPU-only'})"


TorchReader = Callable[[], TorchFacts]


def read_torch() -> TorchFacts:
    """The facts of the torch this process runs (or would import)."""
    module = sys.modules.get("torch")
    version_module = sys.modules.get("torch.version")
    if module is not None and version_module is not None:
        return TorchFacts(
            version=str(getattr(module, "__version__", "")) or None,
            cuda=getattr(version_module, "cuda", None),
        )
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return TorchFacts(version=None, cuda=None)
    for location in spec.submodule_search_locations:
        path = Path(location) / "version.py"
        if path.is_file():
            values = _assignments(path.read_text(encoding="utf-8"))
            version = values.get("__version__")
            cuda = values.get("cuda")
            return TorchFacts(
                version=version if isinstance(version, str) else None,
                cuda=cuda if isinstance(cuda, str) else None,
            )
    return TorchFacts(version=None, cuda=None)


def _assignments(source: str) -> dict[str, object]:
    """Literal module-level assignments (`x = "a"`, `x: T = "a"`) of a Python source."""
    values: dict[str, object] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name):
            try:
                values[target.id] = ast.literal_eval(value)
            except ValueError:
                continue
    return values
