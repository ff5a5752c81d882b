"""Which characters a manifest value may hold on its way to nvcc's own shell.

ninja runs each compile through `/bin/sh -c`, and kernelpack quotes every word for it. But
nvcc, in turn, runs its host compiler and device tools through *its own* `sh -c` (see
`nvcc --dryrun`): it writes `-D` values and paths inside double quotes, where `$`, a
backquote, `"` and `\\` still act, and splits `-D` and `-I` values at commas; it writes
`-Xcompiler` values with no quotes at all, where any shell character acts. Quoting cannot
help at that second shell, so `kernelpack check` rejects those characters instead, naming
the character and the reason. Control characters (a newline) are rejected everywhere by the
TOML reader: build.ninja and the shells take one command per line.

A kind of value:
- `define`: a `defines` value, written by nvcc as `-D "NAME=VALUE"`;
- `flag`: an `nvcc-flags` or `cxx-flags` entry, which may be an `-Xcompiler` value (bare);
- `path`: a source file or include folder, written by nvcc as `"file"` and `"-Ifolder"`,
  and by ninja into build.ninja and the compilers' dependency files;
- `glob`: a `sources` entry, a `path` that may also hold the glob characters `*?[]`.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["KINDS", "Kind", "pattern", "rejected", "unsafe"]

Kind = Literal["define", "flag", "path", "glob"]

#: Every kind, in the order the docs list them.
KINDS: tuple[Kind, ...] = ("define", "flag", "glob", "path")

_SUBSTITUTION = "nvcc passes it to its own sh -c, where it runs or expands a command"
_QUOTING = "nvcc passes it to its own sh -c, where it ends the quoting"
_COMMA = "nvcc splits -D and -I values at commas"
_BARE = "nvcc passes -Xcompiler values unquoted to its own sh -c, where it is a shell character"
_DEPFILE = "the compilers' dependency files, read by ninja, use it as a separator"
_SPACE = "nvcc's own sh -c and the compilers' dependency files split words at it"
_SHELL = "a shell character, unsafe on nvcc's own sh -c command lines"

# character -> why, for the characters every kind rejects.
_ALWAYS = {"$": _SUBSTITUTION, "`": _SUBSTITUTION, '"': _QUOTING, "\\": _QUOTING, "'": _QUOTING}
_REJECTED: dict[str, dict[str, str]] = {
    "define": {**_ALWAYS, ",": _COMMA},
    "flag": {**_ALWAYS, **dict.fromkeys(" ;|&<>()#*?[]{}!~", _BARE)},
    "path": {
        **_ALWAYS,
        ",": _COMMA,
        ":": _DEPFILE,
        " ": _SPACE,
        **dict.fromkeys(";|&<>()#*?[]{}!", _SHELL),
    },
}
_REJECTED["glob"] = {c: why for c, why in _REJECTED["path"].items() if c not in "*?[]"}

_NAMES = {
    " ": "a space",
    "`": "a backquote",
    "\\": "a backslash",
    '"': "a double quote",
    "'": "a single quote",
}


def unsafe(text: str, kind: Kind) -> str | None:
    """Why `text` may not be a `kind` value (`holds "$": …`), or None when it may."""
    rejected = _REJECTED[kind]
    for char in text:
        why = rejected.get(char)
        if why is not None:
            name = _NAMES.get(char) or '"' + char + '"'
            return f"holds {name} ({why})"
    return None


def rejected(kind: Kind) -> dict[str, str]:
    """Every character `kind` refuses -> why (control characters aside: refused everywhere)."""
    return dict(_REJECTED[kind])


def pattern(kind: Kind) -> str:
    """A regular expression (JSON Schema dialect) matching the values `kind` allows."""
    escaped = "".join("\\" + c if c in "\\]^-[" else c for c in sorted(_REJECTED[kind]))
    return f"^[^{escaped}\\u0000-\\u001f\\u007f]*$"
