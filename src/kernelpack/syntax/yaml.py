"""Values written into YAML (the GitHub Actions workflow `kernelpack ci` writes).

A scalar is written double-quoted, JSON-style: `"`, `\\` and every non-printable character
escaped (YAML also breaks lines at `\\x85`, U+2028 and U+2029). GitHub evaluates `${{ ... }}`
inside any string of a workflow before a step runs, so a value holding `${{` is refused: it
would be an expression with access to the job's secrets.

Values never go into a `run:` script's text: a step gets them through its `env:` (written
here) and the script quotes the variable (`"$KERNELPACK_VERSION"`), so the shell sees data.
"""

from __future__ import annotations

import re

from kernelpack.syntax import UnsafeValue, shown

__all__ = ["comment", "env_name", "scalar", "string"]

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")
# Plain words YAML 1.1 (PyYAML, GitHub's older parsers) reads as booleans or null.
_WORDS = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null"})


def _escape(char: str) -> str:
    if char in _ESCAPES:
        return _ESCAPES[char]
    if not char.isprintable():
        code = ord(char)
        if 0xD800 <= code <= 0xDFFF:
            raise UnsafeValue(f"{shown(char)}: a lone surrogate has no YAML form")
        return (
            f"\\x{code:02X}"
            if code <= 0xFF
            else f"\\u{code:04X}"
            if code <= 0xFFFF
            else f"\\U{code:08X}"
        )
    return char


def string(value: str, *, what: str = "value") -> str:
    """`value` as a double-quoted YAML scalar; `UnsafeValue` for a GitHub expression."""
    if "${{" in value:
        raise UnsafeValue(
            f"{what} {shown(value)}: holds `${{{{`, which GitHub Actions evaluates as an expression"
        )
    return '"' + "".join(_escape(c) for c in value) + '"'


def scalar(value: str, *, what: str = "value") -> str:
    """`value` as a plain scalar when it is a word YAML reads as that same string (a runner
    label such as `ubuntu-24.04`), else as `string(value)`."""
    if _PLAIN.fullmatch(value) and value.lower() not in _WORDS:
        return value
    return string(value, what=what)


def env_name(name: str, *, what: str = "variable name") -> str:
    """`name` as an environment variable key (letters, digits, `_`; not a digit first)."""
    if not _ENV_NAME.fullmatch(name):
        raise UnsafeValue(f"{what} {shown(name)}: expected letters, digits and _")
    return name


def comment(text: str, *, what: str = "comment") -> str:
    """`# text`, one line; `UnsafeValue` when it would break out of it."""
    if not text.isprintable():
        raise UnsafeValue(f"{what} {shown(text)}: holds a line break or control character")
    return f"# {text}"
