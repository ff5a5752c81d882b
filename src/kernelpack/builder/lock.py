"""The build-tree lock: concurrent builds of one tree take turns, and never overlap ninja.

`filelock` takes an `flock` on `<build dir>/.lock`; the kernel drops it when its holder dies,
so a killed build never blocks the next one. The holder writes `.lock.holder` (JSON: its pid
and, while ninja runs, ninja's pid and start time, the run's token and session), so that a
waiter can say whom it waits for and a timeout names that pid, and so that the next holder
can stop a ninja, or compiles, that outlived a killed build (`kernelpack.processes`)
before it runs its own in the same folder.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from kernelpack import processes
from kernelpack.errors import BuildError
from kernelpack.processes import ProcessStamp
from kernelpack.toolchain.environment import DEFAULT_LOCK_TIMEOUT
from kernelpack_runtime._files import write_text_atomic

__all__ = ["BuildLock", "build_lock"]

#: Seconds a stale ninja gets to stop its compiles before all are killed.
_STALE_GRACE = 3.0


@dataclass(frozen=True)
class BuildLock:
    """The held lock of one build folder."""

    build_dir: Path

    @property
    def holder_file(self) -> Path:
        return self.build_dir / ".lock.holder"

    def record_child(self, run: processes.ChildRun) -> None:
        """Note that `run` (ninja and its compiles) now runs in the build folder for us."""
        self._write(run)

    def _write(self, run: processes.ChildRun | None) -> None:
        data: dict[str, object] = {"pid": os.getpid()}
        if run is not None:
            data["ninja"] = {"pid": run.ninja.pid, "start": run.ninja.start}
            data["token"] = run.token
            data["session"] = run.session
        # Best effort: the file only informs (whom a waiter waits for, what to stop later).
        with suppress(OSError):
            write_text_atomic(self.holder_file, json.dumps(data) + "\n")


@contextmanager
def build_lock(build_dir: Path, timeout: float = DEFAULT_LOCK_TIMEOUT) -> Iterator[BuildLock]:
    """Hold the lock of `build_dir` for the duration of the block, waiting at most
    `timeout` seconds for another build that holds it (`KERNELPACK_LOCK_TIMEOUT`).

    Before the block runs, a ninja left running in the folder by a killed build is stopped
    (with everything below it). A lock path that cannot be locked (a folder, say) is a
    one-line `BuildError`.
    """
    held = BuildLock(build_dir)
    lock_path = build_dir / ".lock"
    try:
        build_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        what = "a file is in the way" if build_dir.exists() else (exc.strerror or str(exc))
        raise BuildError(f"{build_dir}: cannot make the build folder: {what.lower()}") from None
    try:
        lock = FileLock(str(lock_path))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            print(
                f"kernelpack: waiting for the build lock on {build_dir} "
                f"(held by {_holder(held.holder_file)})",
                file=sys.stderr,
            )
            try:
                lock.acquire(timeout=timeout)
            except Timeout:
                raise BuildError(
                    f"{build_dir} is locked by another build ({_holder(held.holder_file)}); "
                    f"gave up after {timeout:g} s (KERNELPACK_LOCK_TIMEOUT)"
                ) from None
    except OSError as exc:
        what = "is a folder" if lock_path.is_dir() else (exc.strerror or str(exc)).lower()
        raise BuildError(
            f"{lock_path}: cannot take the build lock: {what}; remove it and build again"
        ) from None
    try:
        _stop_stale_ninja(held)
        held._write(None)
        yield held
    finally:
        with suppress(OSError):
            held.holder_file.unlink(missing_ok=True)
        lock.release()


def _stop_stale_ninja(held: BuildLock) -> None:
    """Stop what a killed holder left running in this folder (ninja, compiles), if any."""
    run = _recorded_run(held.holder_file)
    if run is not None and processes.stop_stale(run, _STALE_GRACE):
        print(
            f"kernelpack: stopped ninja (pid {run.ninja.pid}) and its compiles, left running "
            f"in {held.build_dir} by an earlier build that was killed",
            file=sys.stderr,
        )


def _recorded_run(holder_file: Path) -> processes.ChildRun | None:
    data = _read_holder(holder_file)
    ninja, token, session = data.get("ninja"), data.get("token"), data.get("session")
    if not isinstance(ninja, dict) or not isinstance(token, str) or type(session) is not int:
        return None
    pid, start = ninja.get("pid"), ninja.get("start")
    if type(pid) is not int or type(start) is not int or pid <= 1 or not token.isalnum():
        return None
    return processes.ChildRun(ProcessStamp(pid, start), token, session)


def _read_holder(holder_file: Path) -> dict[str, object]:
    try:
        with holder_file.open("rb") as fh:
            data = json.loads(fh.read(4096).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _holder(holder_file: Path) -> str:
    pid = _read_holder(holder_file).get("pid")
    return f"pid {pid}" if type(pid) is int else "an unknown process"
