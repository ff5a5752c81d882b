"""Compiler diagnostics that name files a terminal can open from where the user is.

ninja runs the compilers in the build folder with sources named relative to it
(`../../llm_ops/rmsnorm/csrc/rmsnorm.cu`), which keeps the command lines identical in every
clone, so the compiler cache hits across clones (see `graph`). Those paths mean nothing from
the folder the user ran the build in; `Relocator` rewrites them in the output kernelpack
relays (never in the command lines), relative to that folder when the file lies below it,
else absolute. `file(13): error` (nvcc) and `file:13:5: error` (gcc, clang) become clickable.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from kernelpack.builder.graph import CWD_ALIAS

__all__ = ["Relocator"]

# A path token relative to the build folder: `../…`, a generated file under `gen/` or one
# below `/proc/self/cwd/`, not preceded by a path character (so other absolute paths and
# URLs are left alone), ending before nvcc's `(line)`, gcc's `:line`, a comma, a quote or
# whitespace.
_TAIL = r"[^\s:(),'\"`]+"
_TOKEN_RE = re.compile(
    rf"(?<![\w./\-+])((?:\.\./)+{_TAIL}|gen/{_TAIL}|{re.escape(CWD_ALIAS)}{_TAIL})"
)


@dataclass(frozen=True)
class Relocator:
    """Rewrites build-folder-relative paths in compiler output for a user in `cwd`."""

    build_dir: Path
    cwd: Path

    @classmethod
    def here(cls, build_dir: Path) -> Relocator:
        """For a user in the current working folder."""
        return cls(build_dir.absolute(), Path.cwd())

    def path(self, token: str) -> str | None:
        """The display name of `token` (a path relative to the build folder), or None when
        it names no existing file or folder."""
        if token.startswith(CWD_ALIAS):  # through the build folder's link to the root
            target = Path(os.path.realpath(self.build_dir / token[len(CWD_ALIAS) :]))
        else:
            target = Path(os.path.normpath(self.build_dir / token))
        if not target.exists():
            return None
        try:
            return target.relative_to(self.cwd).as_posix()
        except ValueError:
            return str(target)

    def line(self, text: str) -> str:
        """`text` with every path relative to the build folder rewritten."""
        if "../" not in text and "gen/" not in text and CWD_ALIAS not in text:
            return text

        def swap(match: re.Match[str]) -> str:
            shown = self.path(match.group(1))
            return match.group(1) if shown is None else shown

        return _TOKEN_RE.sub(swap, text)
