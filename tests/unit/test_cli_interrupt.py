"""A stop signal gives exit 128 + that signal wherever in the CLI it lands.

The build's own clean-up is tested in `tests/integration/test_interrupt.py` with real signals;
here the two windows that test can only hit by luck: while the verbs are imported (a
SIGTERM there once gave 130, Ctrl-C's code) and after the verb returned.
"""

from __future__ import annotations

import os
import signal

import pytest

import kernelpack.cli as cli
from kernelpack.errors import Interrupted


@pytest.mark.parametrize(
    ("raised", "code"),
    [
        (Interrupted(signal.SIGTERM), 143),
        (Interrupted(signal.SIGHUP), 129),
        (KeyboardInterrupt(), 130),
    ],
)
def test_signal_while_the_verbs_are_imported(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    raised: BaseException,
    code: int,
) -> None:
    def parser() -> None:
        raise raised

    monkeypatch.setattr(cli, "_parser", parser)
    assert cli.main(["check"]) == code
    assert capsys.readouterr().err == "kernelpack: interrupted\n"


def test_signal_after_the_verb_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    def verb(argv: object) -> int:
        raise Interrupted(signal.SIGTERM)  # as the handler would, once the verb is done

    monkeypatch.setattr(cli, "_main", verb)
    assert cli.main(["check"]) == 143


def test_a_real_sigterm_while_the_verbs_are_imported_is_143(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def parser() -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # delivered to the handler main() installed
        raise AssertionError("the signal did not stop the import")

    monkeypatch.setattr(cli, "_parser", parser)
    before = signal.getsignal(signal.SIGTERM)
    assert cli.main(["check"]) == 143
    assert capsys.readouterr().err == "kernelpack: interrupted\n"
    assert signal.getsignal(signal.SIGTERM) is before  # main() puts the handler back
