"""Shared test setup. Its presence puts `tests/` on `sys.path` (pytest's default import mode),
so tests import the shared fakes as `from fakes import ...` (and `from buildlog import
compiles`, whose lines the hook below writes)."""

from __future__ import annotations

import sys
import time
from collections.abc import Generator
from contextlib import nullcontext

import pytest
from buildlog import ATTRIBUTE


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(
    fixturedef: pytest.FixtureDef[object], request: pytest.FixtureRequest
) -> Generator[None, object, object]:
    what = getattr(fixturedef.func, ATTRIBUTE, None)
    if what is None:
        return (yield)
    _say(request.config, f"kernelpack tests: building {what} (fixture {fixturedef.argname})…")
    started = time.monotonic()
    try:
        result = yield
    except BaseException as exc:
        outcome = "skipped" if isinstance(exc, pytest.skip.Exception) else "failed"
        _say(request.config, f"kernelpack tests: {what}: {outcome} after {_since(started)}")
        raise
    _say(request.config, f"kernelpack tests: built {what} in {_since(started)}")
    return result


def _since(started: float) -> str:
    return f"{time.monotonic() - started:.1f} s"


def _say(config: pytest.Config, line: str) -> None:
    """One line on the terminal past pytest's output capture (stderr without a terminal
    reporter, as in an xdist worker)."""
    capture = config.pluginmanager.getplugin("capturemanager")
    reporter = config.pluginmanager.getplugin("terminalreporter")
    with capture.global_and_fixture_disabled() if capture else nullcontext():
        if reporter is not None:
            reporter.write_line(line)
        else:
            sys.__stderr__.write(line + "\n")
            sys.__stderr__.flush()
