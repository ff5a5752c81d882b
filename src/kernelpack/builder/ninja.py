"""Run ninja on the build folder: a live progress line, compiler output, per-step times.

ninja comes from the `ninja` PyPI package (a dependency of kernelpack), else from PATH.
Per-step wall times come from `.ninja_log`, for the steps this run executed. ninja runs in
a process group of its own, tied to our life (`kernelpack.processes`); a reader
thread drains its output, so a chatty compiler never blocks it, and the main thread stays
free to handle a signal. Output modes: the default progress; verbose (`commands` given)
prints each step's full command line as ninja runs it; quiet prints only what failed steps
printed; `relocate` rewrites the compilers' file names (`diagnostics.Relocator`).
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TextIO

from kernelpack import processes
from kernelpack.errors import BuildError, Interrupted
from kernelpack.toolchain.environment import BuildEnvironment

__all__ = [
    "STOP_GRACE",
    "NinjaResult",
    "Step",
    "compdb",
    "environment",
    "ninja_binary",
    "pending",
    "run",
]

#: Seconds ninja gets to stop its compiles after a stop signal before all are killed.
STOP_GRACE = 1.0

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
    on_start: Callable[[processes.ChildRun], None] | None = None,
    commands: Mapping[str, str] | None = None,
    quiet: bool = False,
    relocate: Callable[[str], str] | None = None,
) -> NinjaResult:
    """Run ninja in `build_dir`; raise `BuildError` when a step fails.

    `on_failure(failed_output, compiler_output)` turns the failure into the error message;
    `on_start(run)` learns ninja's process and run token (the build lock records them).
    Compiler output goes to `stream` (default stderr) as it arrives; on a terminal,
    progress is one line rewritten in place. With `commands` (output -> command line, see
    `compdb`) each step prints its command instead of its name; with `quiet`, only failed
    steps print; `relocate` rewrites each line of compiler output.

    SIGINT, SIGTERM or SIGHUP while ninja runs stop ninja and every compile below it within
    `STOP_GRACE` seconds (ninja removes the outputs of the steps it interrupted), then
    propagate as `KeyboardInterrupt` (`Interrupted` for SIGTERM and SIGHUP).
    """
    display = _Display(
        stream if stream is not None else sys.stderr,
        commands=commands,
        quiet=quiet,
        relocate=relocate,
    )
    cmd = [ninja_binary(), "-C", str(build_dir), f"-j{max(1, jobs)}", *targets]
    run_env = dict(env)
    run_env["NINJA_STATUS"] = _STATUS_PREFIX + "[%f/%t] "
    token = run_env[processes.TOKEN_VARIABLE] = processes.new_token()
    proc: subprocess.Popen[bytes] | None = None
    reader: threading.Thread | None = None
    lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()
    with processes.raise_on_signals():
        try:
            # A signal waits until ninja and its reader run, so ninja is always stopped.
            with processes.signals_held():
                proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    env=run_env,
                    preexec_fn=processes.group_leader(os.getpid()),
                )
                stamp = processes.ProcessStamp.of(proc.pid) or processes.ProcessStamp(proc.pid, 0)
                run = processes.ChildRun(stamp, token, os.getsid(0))
                assert proc.stdout is not None
                reader = threading.Thread(
                    target=_read_lines, args=(proc.stdout, lines), name="ninja-output", daemon=True
                )
                reader.start()
            if on_start is not None:
                on_start(run)
            while (line := _next(lines)) is not None:
                display.line(line)
            code = proc.wait()
        except BaseException as exc:
            if proc is not None:
                with processes.signals_held():
                    processes.stop_child(proc, run, _stop_signal(exc), STOP_GRACE)
            raise
        finally:
            if reader is not None and proc is not None and proc.stdout is not None:
                reader.join(timeout=STOP_GRACE)
                if not reader.is_alive():
                    proc.stdout.close()
            display.close()
    return _outcome(display, code, build_dir, on_failure)


def _outcome(
    display: _Display,
    code: int,
    build_dir: Path,
    on_failure: Callable[[str, str], str] | None,
) -> NinjaResult:
    """The steps a finished ninja run executed, with their times from `.ninja_log`; a
    `BuildError` (`on_failure`'s message) when it failed."""
    output = "\n".join(display.captured)
    if code != 0:
        what = display.failed or "ninja"
        message = on_failure(what, output) if on_failure else f"build step failed: {what}"
        raise BuildError(message)
    times = _log_times(build_dir / ".ninja_log")
    steps = [Step(tool, out, times.get(out, 0.0)) for tool, out in display.started]
    return NinjaResult(steps=steps, output=output)


def pending(build_dir: Path, env: Mapping[str, str]) -> tuple[Step, ...] | None:
    """The steps ninja would run in `build_dir` (a dry run; seconds 0), None when unsure."""
    dry_env = {**env, "NINJA_STATUS": _STATUS_PREFIX + "[%f/%t] "}
    try:
        proc = subprocess.run(
            [ninja_binary(), "-C", str(build_dir), "-n"],
            env=dry_env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    # split("\n"), not splitlines(): that also splits at the prefix's \x1e.
    matches = (_STATUS_RE.match(line.rstrip("\r")) for line in proc.stdout.split("\n"))
    return tuple(Step(m.group(3), m.group(4), 0.0) for m in matches if m is not None)


def _stop_signal(exc: BaseException) -> int:
    """The signal that stops ninja when `exc` ends the run: the one we got, else SIGTERM."""
    if isinstance(exc, Interrupted):
        return exc.signum
    if isinstance(exc, KeyboardInterrupt):
        return signal.SIGINT
    return signal.SIGTERM


class _Display:
    """What the user sees of ninja's output: progress lines and the compilers' messages."""

    def __init__(
        self,
        stream: TextIO,
        *,
        commands: Mapping[str, str] | None = None,
        quiet: bool = False,
        relocate: Callable[[str], str] | None = None,
    ) -> None:
        self.stream = stream
        self.commands = commands
        self.quiet = quiet
        self.relocate = relocate
        # Verbose and quiet output are plain lines: nothing to rewrite in place.
        self.live = stream.isatty() and not quiet and commands is None
        self.started: list[tuple[str, str]] = []
        self.captured: list[str] = []
        self.failed: str | None = None
        self.failing = False  # the lines since the last status line belong to a failed step
        self.command_next = False  # ninja prints a failed step's command after FAILED:

    def line(self, line: str) -> None:
        """Show one line of ninja's output."""
        match = _STATUS_RE.match(line)
        if match:
            done, total, tool, output = match.groups()
            self.started.append((tool, output))
            self.failing = False
            if not self.quiet:
                name = f"{tool} {output}"
                shown = self.commands.get(output, name) if self.commands else name
                self.progress(f"[{done}/{total}] {shown}")
            return
        if line.startswith(("ninja: no work to do", "ninja: Entering")):
            return
        failure = _FAILED_RE.match(line)
        visible = True
        if failure:
            self.failed = failure.group(1).strip()
            self.failing = self.command_next = True
        elif self.command_next:  # the failed step's command line: not an error
            self.command_next = False
            visible = not self.quiet
        elif self.relocate is not None:
            line = self.relocate(line)
        self.captured.append(line)
        if visible and (not self.quiet or self.failing or line.startswith("ninja: ")):
            self.message(line)

    def progress(self, text: str) -> None:
        """A step started: one line, rewritten in place on a terminal."""
        self.stream.write("\r\033[K" + text if self.live else text + "\n")
        self.stream.flush()

    def message(self, line: str) -> None:
        """A line a compiler (or ninja) printed."""
        if self.live:
            self.stream.write("\r\033[K")
        self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        """Leave the terminal's line clean."""
        if self.live and self.started:
            self.stream.write("\r\033[K")
            self.stream.flush()


def compdb(build_dir: Path, env: Mapping[str, str]) -> list[dict[str, str]]:
    """ninja's own compilation database of `build_dir` (`ninja -t compdb`): one entry per
    edge, with `directory`, `command` (the real command line), `file` and `output`."""
    proc = subprocess.run(
        [ninja_binary(), "-C", str(build_dir), "-t", "compdb"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=dict(env),
        check=False,
    )
    if proc.returncode != 0:
        raise BuildError(f"ninja -t compdb failed: {proc.stderr.strip() or proc.stdout.strip()}")
    entries = json.loads(proc.stdout)
    return [{str(k): str(v) for k, v in entry.items()} for entry in entries]


def _read_lines(pipe: IO[bytes], lines: queue.SimpleQueue[str | None]) -> None:
    """Drain ninja's output as it comes (ninja must never block on a full pipe)."""
    try:
        for raw in iter(pipe.readline, b""):
            lines.put(raw.decode("utf-8", "replace").rstrip("\r\n"))
    except (OSError, ValueError):  # the pipe was closed under us: ninja is being stopped
        pass
    finally:
        lines.put(None)


def _next(lines: queue.SimpleQueue[str | None]) -> str | None:
    # A bounded wait, so a signal's handler runs promptly in this (main) thread.
    while True:
        try:
            return lines.get(timeout=0.5)
        except queue.Empty:
            continue


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


def environment(build: BuildEnvironment, *, root: Path, launcher: Path | None) -> dict[str, str]:
    """The environment ninja runs in: the build's child environment
    (`BuildEnvironment.child_environ`) plus what makes the launcher's cache shareable
    between clones of `root`."""
    env = build.child_environ()
    if sys.platform.startswith("linux"):
        # The compilers name their working folder (the build folder, absolute) as the debug
        # info's compilation directory, taken from PWD when PWD names the folder they run in:
        # `/proc/self/cwd` always does, and is the same text in every clone (as in Bazel).
        env["PWD"] = "/proc/self/cwd"
    if launcher is not None:
        # Paths below the root are hashed relative to it, and the working folder is not
        # hashed: a fresh clone in another folder hits the same cache entries.
        env["CCACHE_BASEDIR"] = str(root)
        env["CCACHE_NOHASHDIR"] = "1"
        env["SCCACHE_BASEDIRS"] = str(root)
    return env
