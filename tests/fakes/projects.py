"""Builders of the small kernel projects the unit tests write: files below a folder.

`write_tree(root, {"k/csrc/k.cu": "// k\n", "kernels.toml": ...})` writes each file (parents
made) and returns `root`; `sources(folder, paths)` writes placeholder sources. The unit
tests' `package` / `make_project` fixtures describe *which* project; these write it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = ["sources", "write_tree"]


def write_tree(root: Path, files: Mapping[str, str]) -> Path:
    """Write every `relative path -> text` of `files` below `root`; returns `root`."""
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    root.mkdir(parents=True, exist_ok=True)
    return root


def sources(folder: Path, paths: Iterable[str], text: str = "// x\n") -> Path:
    """Placeholder source files `paths` below `folder` (a comment each); returns `folder`."""
    return write_tree(folder, dict.fromkeys(paths, text))
