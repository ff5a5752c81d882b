"""The build's child processes: started in their own group, tied to our life, always stopped.

ninja runs as the leader of its own process group, so a terminal's Ctrl-C reaches kernelpack
alone, which then stops ninja on purpose: ninja forwards the signal to each compile (it puts
every command in a group of its own), removes the outputs of the interrupted steps and exits.
What still runs after the grace time is killed.

Each run carries a token in its environment (`_KERNELPACK_RUN=<token>`), which every
process below ninja inherits, so the build's processes are found even after ninja is gone
and they were re-parented. A kernelpack killed outright (SIGKILL) cannot stop anything; the
kernel then sends ninja SIGTERM (`PR_SET_PDEATHSIG`), and the next build of the folder stops
whatever still carries the recorded token (see `kernelpack.builder.lock`). Processes that
left the build's session (a compiler cache's server daemon) are never touched.

Linux only, as the rest of the build: processes are found through `/proc`.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from types import FrameType
from typing import Any

from kernelpack.errors import Interrupted

__all__ = [
    "STOP_SIGNALS",
    "TOKEN_VARIABLE",
    "ChildRun",
    "ProcessStamp",
    "carrying",
    "group_leader",
    "new_token",
    "raise_on_signals",
    "signals_held",
    "stop_child",
    "stop_stale",
]

#: The signals that stop a build (exit code 128 + signal).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: The environment variable that marks every process of one ninja run.
TOKEN_VARIABLE = "_KERNELPACK_RUN"
_PR_SET_PDEATHSIG = 1
_POLL = 0.02


@dataclass(frozen=True)
class ProcessStamp:
    """A process named so that a recycled pid is never mistaken for it: pid + start time."""

    pid: int
    start: int
    """`/proc/<pid>/stat` field 22 (clock ticks after boot)."""

    @classmethod
    def of(cls, pid: int) -> ProcessStamp | None:
        """The stamp of the running process `pid`; None when there is none (or a zombie)."""
        stat = _stat(pid)
        if stat is None or stat[0] == "Z":
            return None
        return cls(pid, int(stat[19]))

    def alive(self) -> bool:
        """Whether this very process still runs (not a zombie, not a recycled pid)."""
        return ProcessStamp.of(self.pid) == self


@dataclass(frozen=True)
class ChildRun:
    """One ninja run: its process, its token, and the session its processes live in."""

    ninja: ProcessStamp
    token: str
    session: int


def new_token() -> str:
    """A fresh run token."""
    return secrets.token_hex(8)


def group_leader(parent: int) -> Callable[[], None]:
    """A `preexec_fn`: the child leads a new process group and gets SIGTERM when `parent`
    dies (it exits at once when `parent` died before the hook was in place)."""
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before the fork, not in the child
    prctl = libc.prctl

    def hook() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # see `signals_held`
        os.setpgid(0, 0)
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return hook


def carrying(token: str, session: int) -> list[ProcessStamp]:
    """The live processes of `session` whose environment holds the run token `token`."""
    needle = f"{TOKEN_VARIABLE}={token}".encode()
    found: list[ProcessStamp] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        stat = _stat(pid)
        if stat is None or stat[0] == "Z" or int(stat[3]) != session:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                environ = fh.read()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(ProcessStamp(pid, int(stat[19])))
    return found


def stop_child(proc: subprocess.Popen[bytes], run: ChildRun, signum: int, grace: float) -> None:
    """Stop our child `proc` (ninja, a group leader) and every process of its run; reap it.

    `signum` goes to ninja first, which lets it stop its compiles and clean up; after
    `grace` seconds ninja is killed (SIGKILL), and so is every process of the run that is
    still there.
    """
    if proc.poll() is None:
        with suppress(ProcessLookupError):
            os.kill(proc.pid, signum)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    _kill_run(run, grace)


def stop_stale(run: ChildRun, grace: float) -> bool:
    """Stop the processes an earlier, killed build left running (not our children).

    ninja gets SIGTERM and `grace` seconds to stop its compiles; then every process of the
    run is killed. Returns whether anything was running.
    """
    if not run.ninja.alive() and not carrying(run.token, run.session):
        return False
    if run.ninja.alive():
        with suppress(ProcessLookupError):
            os.kill(run.ninja.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while run.ninja.alive() and time.monotonic() < deadline:
            time.sleep(_POLL)
    _kill_run(run, grace)
    return True


def _kill_run(run: ChildRun, grace: float) -> None:
    """SIGKILL every process of `run` (and ninja), until none is left or `grace` is over."""
    deadline = time.monotonic() + grace
    while True:
        left = carrying(run.token, run.session)
        if run.ninja.alive():
            left.append(run.ninja)
        if not left or time.monotonic() > deadline:
            return
        for stamp in left:
            if stamp.alive():
                with suppress(OSError):
                    os.kill(stamp.pid, signal.SIGKILL)
        time.sleep(_POLL)


@contextmanager
def raise_on_signals() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP into `Interrupted` in the main thread, as SIGINT already is
    `KeyboardInterrupt`, so `finally` blocks and temporary-file clean-ups run.

    Signals that are ignored (`nohup`) stay ignored; elsewhere than in the main thread,
    nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[signal.Signals, Callable[[int, FrameType | None], Any] | int | None] = {}
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, _raise)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def signals_held() -> Iterator[None]:
    """Hold the stop signals while a clean-up runs; they are delivered afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _raise(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


def _stat(pid: int) -> list[str] | None:
    """`/proc/<pid>/stat` after the command name: [state, ppid, pgrp, session, ...]."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()
