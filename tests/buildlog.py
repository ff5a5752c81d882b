"""`@compiles("what")`: a fixture that runs a real build says so in the test log.

A real compile takes from seconds to minutes; pytest captures what a fixture prints, so a CI
log would show nothing meanwhile. A fixture marked with `@compiles` (under its
`@pytest.fixture`) gets one line when its setup starts and one when it ends, written past the
capture by the hook in `tests/conftest.py`:

    kernelpack tests: building kpdemo, in place (fixture built)…
    kernelpack tests: built kpdemo, in place in 41.3 s
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import TypeVar

import pytest

__all__ = ["ATTRIBUTE", "announced", "compiles"]

ATTRIBUTE = "__kernelpack_compiles__"

F = TypeVar("F", bound=Callable[..., object])


def compiles(what: str) -> Callable[[F], F]:
    """Mark a fixture function as one that compiles `what`."""

    def mark(func: F) -> F:
        setattr(func, ATTRIBUTE, what)
        return func

    return mark


@contextmanager
def announced(config: pytest.Config, what: str, where: str) -> Iterator[None]:
    """One line when the build of `what` starts and one when it ends (or fails, or skips),
    past pytest's capture: for `@compiles` fixtures, and for the shared kit's factories,
    whose builds run at their first call."""
    say(config, f"kernelpack tests: building {what} ({where})…")
    started = time.monotonic()
    try:
        yield
    except BaseException as exc:
        outcome = "skipped" if isinstance(exc, pytest.skip.Exception) else "failed"
        say(config, f"kernelpack tests: {what}: {outcome} after {_since(started)}")
        raise
    say(config, f"kernelpack tests: built {what} in {_since(started)}")


def _since(started: float) -> str:
    return f"{time.monotonic() - started:.1f} s"


def say(config: pytest.Config, line: str) -> None:
    """One line on the terminal past pytest's output capture (stderr without a terminal
    reporter, as in an xdist worker)."""
    capture = config.pluginmanager.getplugin("capturemanager")
    reporter = config.pluginmanager.getplugin("terminalreporter")
    with capture.global_and_fixture_disabled() if capture else nullcontext():
        if reporter is not None:
            reporter.write_line(line)
        else:
            assert sys.__stderr__ is not None
            sys.__stderr__.write(line + "\n")
            sys.__stderr__.flush()
