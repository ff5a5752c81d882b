"""Start a child with the stop signals at their default dispositions.

An ignored signal stays ignored across fork and exec, and no shell can reset one it was
started with: a suite run under nohup, in the background of a non-interactive shell (which
ignores SIGINT for `&` jobs), or by a CI agent that ignores SIGHUP would otherwise start a
kernelpack that rightly keeps ignoring the signal, as its parent asked. Tests that signal a
build start it through `with_default_signals`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from os import PathLike

__all__ = ["with_default_signals"]

_DEFAULT_SIGNALS = (
    "import os, signal, sys\n"
    "for name in ('SIGINT', 'SIGTERM', 'SIGHUP'):\n"
    "    signal.signal(getattr(signal, name), signal.SIG_DFL)\n"
    "os.execv(sys.argv[1], sys.argv[1:])\n"
)


def with_default_signals(command: Sequence[str | PathLike[str]]) -> list[str]:
    """`command` (its first word a path to an executable) run with SIGINT, SIGTERM and SIGHUP
    at their defaults, whatever this process ignores."""
    return [sys.executable, "-c", _DEFAULT_SIGNALS, *map(str, command)]
