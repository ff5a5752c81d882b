"""Values written into Starlark (the BUILD files `kernelpack bazel init` generates).

A string literal escapes `\\` and `"`; a value holding a control or other non-printable
character (a newline, which would end the literal's line, or a character buildifier and
Bazel's lexer escape differently) is refused, as is a comment that would break its line.
"""

from __future__ import annotations

from collections.abc import Sequence

from kernelpack.syntax import UnsafeValue, shown

__all__ = ["comment", "string", "string_list"]


def _refuse_unprintable(value: str, what: str) -> None:
    if not value.isprintable():
        bad = next(c for c in value if not c.isprintable())
        raise UnsafeValue(
            f"{what} {shown(value)}: holds {shown(bad)}; a BUILD file takes printable "
            "characters only"
        )


def string(value: str, *, what: str = "value") -> str:
    """`value` as a Starlark string literal (`"..."`)."""
    _refuse_unprintable(value, what)
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def string_list(items: Sequence[str], *, what: str = "value", indent: str = "    ") -> str:
    """`["a"]` for one item, else one item per line (buildifier's layout)."""
    if len(items) == 1:
        return f"[{string(items[0], what=what)}]"
    inner = "".join(f"{indent}    {string(item, what=what)},\n" for item in items)
    return f"[\n{inner}{indent}]"


def comment(text: str, *, what: str = "comment") -> str:
    """`# text`, one line."""
    _refuse_unprintable(text, what)
    return f"# {text}"
