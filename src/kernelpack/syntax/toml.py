"""Values written into TOML (`kernels.toml`, `pyproject.toml`, `[tool.uv.sources]` pins).

TOML basic strings hold any Unicode scalar value; only `"`, `\\` and control characters need
escapes. `json.dumps` is not a TOML writer: it escapes a character beyond the BMP as a
surrogate pair (`\\ud83d\\ude00`), which TOML rejects. Lone surrogates (from a file name
decoded with `surrogateescape`) have no TOML form and are refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from kernelpack.syntax import UnsafeValue, shown

__all__ = ["array", "inline_table", "key", "string"]

_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _escape(char: str) -> str:
    if char in _ESCAPES:
        return _ESCAPES[char]
    code = ord(char)
    if code < 0x20 or code == 0x7F:
        return f"\\u{code:04X}"
    if 0xD800 <= code <= 0xDFFF:
        raise UnsafeValue(f"{shown(char)}: a lone surrogate has no TOML form")
    return char


def string(value: str) -> str:
    """`value` as a TOML basic string (`"..."`), characters beyond the BMP as themselves."""
    return '"' + "".join(_escape(c) for c in value) + '"'


def key(name: str) -> str:
    """`name` as a TOML key: bare when TOML allows it, else a basic string."""
    return name if _BARE_KEY.fullmatch(name) else string(name)


def array(items: Iterable[str]) -> str:
    """`["a", "b"]`: an inline array of strings."""
    return "[" + ", ".join(string(item) for item in items) + "]"


def inline_table(mapping: Mapping[str, str]) -> str:
    """`{ A = "1", B = "2" }` (`{}` when empty): an inline table of strings."""
    if not mapping:
        return "{}"
    return "{ " + ", ".join(f"{key(k)} = {string(v)}" for k, v in mapping.items()) + " }"
