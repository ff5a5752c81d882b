"""Run one compile and note its peak memory: `python _peak.py LOG [--oom-counter FILE]...
OUTPUT -- COMMAND...`.

The graph puts this in front of each compile (see `kernelpack.builder.memory`). It runs
COMMAND as its child, waits for it with `wait4` and appends `OUTPUT<TAB>bytes<TAB>end` to
LOG. `bytes` is the largest resident set of the child or of any process below it that was
waited for (nvcc's cicc, ptxas and host compiler, ccache's compiler): one process's, so for
nvcc with `--threads N` about one of the N cicc it runs at once. `end` is `oom` when the
command failed while the kernel's out-of-memory killer killed a process of this cgroup (the
`oom_kill` count of the cgroup's `memory.events`, or of `memory.oom_control` under cgroup
v1, else of `/proc/vmstat`, rose): nvcc, whose cicc was killed, exits 1 itself. Otherwise
`end` is `-`. `--oom-counter FILE` reads the count from FILE instead (any file holding an
`oom_kill N` line). Its exit status is the command's (128 + signal when a signal ended it),
and a signal sent to it is passed on to the command.
Standalone and stdlib-only: it starts in a few milliseconds and imports no kernelpack code.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

__all__ = ["OOM", "main", "oom_counters", "oom_kills"]

#: The last field of a log line whose command the out-of-memory killer ended.
OOM = "oom"

_CGROUPS = "/sys/fs/cgroup"
_VMSTAT = "/proc/vmstat"


def main(argv: list[str]) -> int:
    """Run the command in `argv` (`LOG [--oom-counter FILE]... OUTPUT -- COMMAND...`);
    return its exit status."""
    parsed = _parse(argv)
    if parsed is None:
        sys.stderr.write("usage: _peak.py LOG [--oom-counter FILE]... OUTPUT -- COMMAND...\n")
        return 2
    log, counters, output, command = parsed
    counters = counters or oom_counters()
    before = oom_kills(counters)
    try:
        pid = os.posix_spawnp(command[0], command, os.environ)
    except OSError as exc:
        sys.stderr.write(f"{command[0]}: {exc.strerror}\n")
        return 127

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, forward)
    while True:
        try:
            _, status, usage = os.wait4(pid, 0)
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries wait4 itself
            continue
    code = (
        128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.waitstatus_to_exitcode(status)
    )
    after = oom_kills(counters) if code != 0 else before
    killed = before is not None and after is not None and after > before
    _note(log, f"{output}\t{usage.ru_maxrss * 1024}\t{OOM if killed else '-'}\n")  # Linux: KiB
    return code


def _parse(argv: list[str]) -> tuple[str, list[str], str, list[str]] | None:
    """(LOG, the `--oom-counter` files, OUTPUT, COMMAND) of `argv`, None when malformed."""
    if not argv:
        return None
    log, rest, counters = argv[0], argv[1:], []
    while len(rest) >= 2 and rest[0] == "--oom-counter":
        counters.append(rest[1])
        rest = rest[2:]
    if len(rest) < 3 or rest[1] != "--":
        return None
    return log, counters, rest[0], rest[2:]


def oom_counters() -> list[str]:
    """The files counting the out-of-memory kills of this process's cgroup (v2
    `memory.events`, v1 `memory.oom_control`), else the machine's (`/proc/vmstat`)."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        lines = []
    found = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        controllers, relative = parts[1], parts[2].lstrip("/")
        if controllers == "":
            candidate = os.path.join(_CGROUPS, relative, "memory.events")
        elif "memory" in controllers.split(","):
            candidate = os.path.join(_CGROUPS, "memory", relative, "memory.oom_control")
        else:
            continue
        if os.path.isfile(candidate):
            found.append(candidate)
    return found or [_VMSTAT]


def oom_kills(counters: list[str]) -> int | None:
    """The sum of the `oom_kill N` lines of `counters`; None when one cannot be read."""
    total = 0
    for counter in counters:
        try:
            with open(counter, encoding="utf-8") as handle:
                text = handle.read()
        except OSError:
            return None
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                total += int(value)
    return total


def _note(log: str, line: str) -> None:
    """Append `line` to `log` in one write."""
    try:
        descriptor = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            # One short write with O_APPEND: concurrent compiles never interleave a line.
            os.write(descriptor, line.encode())
        finally:
            os.close(descriptor)
    except OSError:
        pass  # a missing measurement only means the next plan uses the estimate


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
