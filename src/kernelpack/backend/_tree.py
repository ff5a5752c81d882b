"""Walking a source tree for an archive: what ships is regular files inside the tree.

Wheels and sdists store file contents, never links. A symlink whose target lies inside the
tree ships the target's content under the link's name (a linked folder is walked); a symlink
that leads outside the tree, dangles or loops is a `UsageError` naming it, so no outside file
ships and no folder vanishes silently. Temporary files (an interrupted atomic write's
`.<name>.XXXXXXXX`, `.<wheel>.partial`, `*.tmp`) never ship.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from kernelpack.errors import UsageError
from kernelpack.project._toml import display_path, is_inside
from kernelpack_runtime._files import temp_pattern

__all__ = ["is_temporary", "tree_files"]

# An atomic write's sibling (`kernelpack_runtime._files.temp_pattern`); our staging folders
# end in `.partial`, other writers' temp files in `.tmp`.
_TEMPORARY = re.compile(rf"^{temp_pattern('.+').pattern}$|^\..+\.partial$|\.tmp$")


def is_temporary(name: str) -> bool:
    """Whether a file or folder name is an unfinished write's temporary (never shipped)."""
    return _TEMPORARY.search(name) is not None


def tree_files(
    root: Path,
    *,
    skip_dir: Callable[[Path], bool] = lambda _: False,
    skip_file: Callable[[Path], bool] = lambda _: False,
) -> Iterator[tuple[Path, Path]]:
    """(file to read, its path relative to `root`) for every file below `root`, sorted.

    `skip_dir` and `skip_file` get the path relative to `root` (a skipped folder is not
    entered, so a bad link inside it is no error). Symlinks are resolved as the module
    docstring says.
    """
    real_root = root.resolve()
    yield from _walk(root, Path(), real_root, frozenset({real_root}), skip_dir, skip_file)


def _walk(
    folder: Path,
    rel: Path,
    real_root: Path,
    seen: frozenset[Path],
    skip_dir: Callable[[Path], bool],
    skip_file: Callable[[Path], bool],
) -> Iterator[tuple[Path, Path]]:
    with os.scandir(folder) as entries:
        names = sorted(entry.name for entry in entries)
    for name in names:
        path = folder / name
        relative = rel / name
        if is_temporary(name):
            continue
        target = path
        if path.is_symlink():
            target = path.resolve()
            if not is_inside(target, real_root):
                raise UsageError(
                    f"{display_path(path)}: a symlink to {target}, outside "
                    f"{display_path(real_root)}; an archive ships only files inside the tree"
                )
            if not target.exists():
                raise UsageError(f"{display_path(path)}: a symlink to nothing ({target})")
        if target.is_dir():
            if skip_dir(relative):
                continue
            real = target.resolve()
            if real in seen:
                raise UsageError(
                    f"{display_path(path)}: a symlink to one of its own parent folders "
                    "(it would be walked forever)"
                )
            yield from _walk(path, relative, real_root, seen | {real}, skip_dir, skip_file)
        elif target.is_file() and not skip_file(relative):
            yield target, relative
