"""The import hook of a kernelpack editable install: rebuild what changed, then import.

This file is standalone (standard library only): the editable wheel carries a copy of it as
`_<dist>_editable_hook.py`, ending in one `install(...)` call with the package's facts, and a
`.pth` line that imports it at interpreter start-up. As meson-python's editable loader does,
it puts a finder first on `sys.meta_path`; when the package itself is first imported, the
finder checks for changes and, when there are some, runs the build before the import goes on.

The check is cheap, so an unchanged tree costs a few milliseconds: the stamp the last build
wrote (size and mtime of the manifest, `pyproject.toml`, the build record, the installed
libraries and the source folders) and `ninja -n` on the build folder (sources, headers
through the depfiles, command lines). When anything changed, `python -m
kernelpack.backend.editable` rebuilds with the settings of the install. When it compiles
something, two lines go to stderr: `kernelpack: rebuilding rmsnorm (1 file)…` as it starts
and `kernelpack: rebuilt rmsnorm (1 file, 2.1 s)` when it is done; nothing when nothing
changed. A failure raises `ImportError` carrying the compiler's first error lines.

`KERNELPACK_EDITABLE_SKIP` (folders, `os.pathsep`-separated, compared after resolving) turns
the check off for those project roots; `KERNELPACK_EDITABLE_VERBOSE=1` shows the build's own
output. A process that cannot compile (no nvcc) imports the previous build unchanged, after one
line saying so: the record, the stamp and the libraries stay, and the next import with the
toolchain rebuilds.
"""

from __future__ import annotations

import os
import sys

# Imported at every interpreter start-up (through the .pth): nothing beyond os and sys until
# the package is imported. The names below are for type checkers only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

__all__ = ["SKIP", "STAMP", "VERBOSE", "EditableFinder", "install"]

SKIP = "KERNELPACK_EDITABLE_SKIP"
VERBOSE = "KERNELPACK_EDITABLE_VERBOSE"
#: The stamp file in the build folder, written by every editable (re)build.
STAMP = "editable.json"
# How the rebuild's line about what it is compiling starts (see `editable.starting_line`).
_STARTING = "kernelpack: rebuilding "


class EditableFinder:
    """A meta-path finder that rebuilds `package` before its first import in a process.

    It finds nothing itself (`find_spec` returns None): the package is imported from the
    source tree by the path finder, as the `.pth` path line of the install arranges.
    """

    def __init__(
        self,
        package: str,
        root: str,
        build_dir: str,
        python: str,
        ninja: str,
        settings: dict[str, Any],
    ) -> None:
        self.package = package
        self.root = root
        self.build_dir = build_dir
        self.python = python
        self.ninja = ninja
        self.settings = settings
        self.checked = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.package!r}, {self.root!r})"

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if fullname != self.package or self.checked:
            return None
        if _skipped(self.root, os.environ.get(SKIP, "")):
            return None
        if self.stale():
            self.rebuild()
        self.checked = True
        return None

    def stale(self) -> bool:
        """Whether anything changed since the last build (cheap: stats and `ninja -n`)."""
        import json

        try:
            with open(os.path.join(self.build_dir, STAMP), encoding="utf-8") as handle:
                stamp = json.load(handle)
            for name, (size, mtime_ns) in stamp["files"].items():
                try:
                    info = os.stat(name)
                except OSError:
                    if size is not None:
                        return True
                    continue
                if size is None or (info.st_size, info.st_mtime_ns) != (size, mtime_ns):
                    return True
        except (OSError, ValueError, KeyError, TypeError):
            return True
        if not stamp.get("graph"):
            return False
        import subprocess

        try:
            dry = subprocess.run(
                [self.ninja, "-n", "-C", self.build_dir],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                check=False,
            )
        except OSError:
            return True
        return dry.returncode != 0 or "ninja: no work to do." not in dry.stdout

    def rebuild(self) -> None:
        """Run the build; print one line when it compiled; `ImportError` when it failed."""
        import json
        import subprocess
        import tempfile
        import time

        env = dict(os.environ)
        env[SKIP] = os.pathsep.join(filter(None, (env.get(SKIP), self.root)))
        verbose = env.get(VERBOSE, "") not in ("", "0")
        argv = [self.python, "-m", "kernelpack.backend.editable", self.root]
        argv += ["--settings", json.dumps(self.settings)]
        if verbose:
            argv.append("--verbose")
        started = time.monotonic()
        held: list[str] = []
        try:
            with tempfile.TemporaryFile("w+", encoding="utf-8") as stdout:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=stdout,
                    stderr=None if verbose else subprocess.PIPE,
                    text=True,
                    env=env,
                )
                # The rebuild's own line ("rebuilding ... (N files)") is shown as it comes;
                # the rest is kept for the error message.
                for line in proc.stderr or ():
                    if line.startswith(_STARTING):
                        sys.stderr.write(line)
                        sys.stderr.flush()
                    else:
                        held.append(line)
                returncode = proc.wait()
                stdout.seek(0)
                printed = stdout.read()
        except OSError as exc:
            raise ImportError(
                f"kernelpack: cannot rebuild {self.package}: {self.python} did not run ({exc})",
                name=self.package,
            ) from None
        seconds = time.monotonic() - started
        outcome = _outcome(printed)
        if returncode != 0 or outcome is None or not outcome.get("ok"):
            raise ImportError(_failure(self.package, outcome, "".join(held)), name=self.package)
        kept = outcome.get("kept")
        if kept:
            print(
                f"kernelpack: cannot rebuild {self.package} in this process ({kept}); "
                "importing the previous build, unchanged",
                file=sys.stderr,
                flush=True,
            )
        files: dict[str, int] = outcome.get("compiled", {})
        if files:
            count = sum(files.values())
            noun = "file" if count == 1 else "files"
            print(
                f"kernelpack: rebuilt {', '.join(files)} ({count} {noun}, {seconds:.1f} s)",
                file=sys.stderr,
                flush=True,
            )


def _skipped(root: str, skip: str) -> bool:
    """Whether `root` is one of the `os.pathsep`-separated folders of `skip`, compared as
    real paths (a trailing slash or a symlinked route still names the same folder)."""
    if not skip:
        return False
    real = os.path.realpath(root)
    return any(folder and os.path.realpath(folder) == real for folder in skip.split(os.pathsep))


def _outcome(stdout: str | None) -> dict[str, Any] | None:
    """The JSON object the rebuild printed as its last line, if any."""
    import json

    for line in reversed((stdout or "").splitlines()):
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
    return None


def _failure(package: str, outcome: dict[str, Any] | None, stderr: str | None) -> str:
    if outcome is None:
        if "No module named 'kernelpack" in (stderr or ""):
            return (
                f"kernelpack: cannot rebuild {package}: kernelpack is not importable by the "
                "interpreter that installed it; editable rebuilds need an install made "
                "with --no-build-isolation"
            )
        tail = (stderr or "").strip().splitlines()[-5:]
        detail = "\n".join(["the build did not report", *tail])
    else:
        detail = str(outcome.get("error", "the build failed"))
        lines = [str(line) for line in outcome.get("compiler", [])]
        if lines:
            detail += "\n" + "\n".join(f"  {line}" for line in lines)
    return (
        f"kernelpack: rebuilding {package} failed: {detail}\n"
        f"({VERBOSE}=1 shows the whole build as it runs)"
    )


def install(
    package: str,
    root: str,
    build_dir: str,
    python: str,
    ninja: str,
    settings: dict[str, Any],
) -> None:
    """Put the finder for `package` first on `sys.meta_path` (once)."""
    for finder in sys.meta_path:
        if isinstance(finder, EditableFinder) and finder.package == package:
            return
    sys.meta_path.insert(0, EditableFinder(package, root, build_dir, python, ninja, settings))
