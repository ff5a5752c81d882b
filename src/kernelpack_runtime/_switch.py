"""On/off environment switches (`KERNELPACK_REQUIRE=1`), read one way by the build and by
the pytest plugin: a value that is not a boolean is an error, never a quiet "no"."""

from __future__ import annotations

from kernelpack_runtime.errors import UsageError

__all__ = ["parse_switch"]

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


def parse_switch(value: str, name: str) -> bool:
    """`1/0`, `true/false`, `yes/no`, `on/off` (any case; empty is off); anything else is a
    `UsageError` naming `name`, the variable or setting it came from."""
    word = value.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise UsageError(f"{name}={value} is not a boolean; use 1 or 0")
