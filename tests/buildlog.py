"""`@compiles("what")`: a fixture that runs a real build says so in the test log.

A real compile takes from seconds to minutes; pytest captures what a fixture prints, so a CI
log would show nothing meanwhile. A fixture marked with `@compiles` (under its
`@pytest.fixture`) gets one line when its setup starts and one when it ends, written past the
capture by the hook in `tests/conftest.py`:

    kernelpack tests: building kpdemo, in place (fixture built)…
    kernelpack tests: built kpdemo, in place in 41.3 s
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["ATTRIBUTE", "compiles"]

ATTRIBUTE = "__kernelpack_compiles__"

F = TypeVar("F", bound=Callable[..., object])


def compiles(what: str) -> Callable[[F], F]:
    """Mark a fixture function as one that compiles `what`."""

    def mark(func: F) -> F:
        setattr(func, ATTRIBUTE, what)
        return func

    return mark
