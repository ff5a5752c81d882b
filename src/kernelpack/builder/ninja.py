"""Run ninja on the build folder: a live progress line, compiler output, per-step times.

ninja comes from the `ninja` PyPI package (a dependency of kernelpack), else from PATH.
Per-step wall times come from `.ninja_log`, for the steps this run executed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from kernelpack.errors import BuildError

__all__ = ["NinjaResult", "Step", "environment", "ninja_binary", "run"]

_STATUS_PREFIX = "\x1ekp\x1e"
# ninja prints one status line per started/finished edge: "<prefix>[3/7] nvcc obj/x.o".
_STATUS_RE = re.compile(re.escape(_STATUS_PREFIX) + r"\[(\d+)/(\d+)\] (\S+) (.*)$")
_FAILED_RE = re.compile(r"^FAILED: (?:\[code=\d+\] )?(.*)$")


@dataclass(frozen=True)
class Step:
    """One executed graph edge (a compile or a link) and how long it took."""

    tool: str
    """"nvcc", "c++", "cc" or "link"."""
    output: str
    """Output path relative to the build folder."""
    seconds: float


@dataclass
class NinjaResult:
    """What one ninja run did."""

    steps: list[Step] = field(default_factory=list)
    output: str = ""
    """Everything the compilers printed (warnings included)."""


def ninja_binary() -> str:
    """The ninja executable: the `ninja` package's, else one on PATH.

    The package's binary sits in the scripts folder of the environment it was installed
    into, which `ninja.BIN_DIR` misses when that environment is reached through a `.pth`
    from another one; look there too, so one build tree is never run by two ninja versions
    (their `.ninja_log` command hashes differ, which would rebuild everything).
    """
    try:
        import ninja  # the PyPI package

        folders = [Path(ninja.BIN_DIR)] if ninja.BIN_DIR else []
        # <env>/lib/pythonX.Y/site-packages/ninja/__init__.py -> <env>/bin
        folders.append(Path(ninja.__file__).resolve().parents[4] / "bin")
        for folder in folders:
            if (folder / "ninja").is_file():
                return str(folder / "ninja")
    except (ImportError, IndexError):
        pass
    found = shutil.which("ninja")
    if found is None:
        raise BuildError("ninja is not installed (pip install ninja)")
    return found


def run(
    build_dir: Path,
    *,
    jobs: int,
    env: Mapping[str, str],
    targets: tuple[str, ...] = (),
    stream: TextIO | None = None,
    on_failure: Callable[[str, str], str] | None = None,
) -> NinjaResult:
    """Run ninja in `build_dir`; raise `BuildError` when a step fails.

    `on_failure(failed_output, compiler_output)` turns the failure into the error message.
    Compiler output goes to `stream` (default stderr) as it arrives; on a terminal, progress
    is one line rewritten in place.
    """
    stream = stream if stream is not None else sys.stderr
    live = stream.isatty()
    log_path = build_dir / ".ninja_log"
    cmd = [ninja_binary(), "-C", str(build_dir), f"-j{max(1, jobs)}", *targets]
    run_env = dict(env)
    run_env["NINJA_STATUS"] = _STATUS_PREFIX + "[%f/%t] "
    started: list[tuple[str, str]] = []
    captured: list[str] = []
    failed: str | None = None
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=run_env,
        errors="replace",
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            match = _STATUS_RE.match(line)
            if match:
                done, total, tool, output = match.groups()
                started.append((tool, output))
                text = f"[{done}/{total}] {tool} {output}"
                if live:
                    stream.write("\r\033[K" + text)
                else:
                    stream.write(text + "\n")
                stream.flush()
                continue
            if line.startswith("ninja: no work to do") or line.startswith("ninja: Entering"):
                continue
            failure = _FAILED_RE.match(line)
            if failure:
                failed = failure.group(1).strip()
            if live:
                stream.write("\r\033[K")
            captured.append(line)
            stream.write(line + "\n")
            stream.flush()
        code = proc.wait()
    except KeyboardInterrupt:
        # ninja got the same SIGINT; it stops its jobs and removes their partial outputs.
        proc.wait()
        raise
    finally:
        if live and started:
            stream.write("\r\033[K")
            stream.flush()
    output = "\n".join(captured)
    if code != 0:
        what = failed or "ninja"
        message = on_failure(what, output) if on_failure else f"build step failed: {what}"
        raise BuildError(message)
    times = _log_times(log_path)
    steps = [Step(tool, out, times.get(out, 0.0)) for tool, out in started]
    return NinjaResult(steps=steps, output=output)


def _log_times(log_path: Path) -> dict[str, float]:
    """Output -> seconds of its last run, from `.ninja_log` (format v5+)."""
    times: dict[str, float] = {}
    if not log_path.is_file():
        return times
    with log_path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.startswith("#"):
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 4:
                continue
            try:
                start, end = int(parts[0]), int(parts[1])
            except ValueError:
                continue
            times[parts[3]] = (end - start) / 1000.0
    return times


def environment(base: Mapping[str, str], *, root: Path, launcher: Path | None) -> dict[str, str]:
    """`base` plus what makes the launcher's cache shareable between clones of `root`."""
    env = dict(base)
    if launcher is not None:
        # Paths below the root are hashed relative to it, and the working folder is not
        # hashed: a fresh clone in another folder hits the same cache entries.
        env["CCACHE_BASEDIR"] = str(root)
        env["CCACHE_NOHASHDIR"] = "1"
        env["SCCACHE_BASEDIRS"] = str(root)
    env.pop("MAKEFLAGS", None)
    # nvcc reads these itself, behind the cache's back: the graph puts them on the command
    # line instead (see graph.render), so they must not be applied twice.
    env.pop("NVCC_PREPEND_FLAGS", None)
    env.pop("NVCC_APPEND_FLAGS", None)
    return env
