"""Run one compile and note its peak memory: `python _peak.py LOG OUTPUT -- COMMAND...`.

The graph puts this in front of each compile (see `kernelpack.builder.memory`). It runs
COMMAND as its child, waits for it with `wait4` and appends `OUTPUT<TAB>bytes` to LOG: the
largest resident set of the child or of any process below it that was waited for (nvcc's
cicc, ptxas and host compiler, ccache's compiler). Its exit status is the command's (128 +
signal when a signal ended it), and a signal sent to it is passed on to the command.
Standalone and stdlib-only: it starts in a few milliseconds and imports no kernelpack code.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

__all__ = ["main"]


def main(argv: list[str]) -> int:
    """Run the command in `argv` (`LOG OUTPUT -- COMMAND...`); return its exit status."""
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: _peak.py LOG OUTPUT -- COMMAND...\n")
        return 2
    log, output, command = argv[0], argv[1], argv[3:]
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
    peak = usage.ru_maxrss * 1024  # Linux reports kilobytes
    try:
        descriptor = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            # One short write with O_APPEND: concurrent compiles never interleave a line.
            os.write(descriptor, f"{output}\t{peak}\n".encode())
        finally:
            os.close(descriptor)
    except OSError:
        pass  # a missing measurement only means the next plan uses the estimate
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
