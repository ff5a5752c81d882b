"""Lines of a `.pth` file (the editable install's path line, the bridge).

`site` reads a `.pth` file, splits it into lines and, for each, skips it when it starts with
`#`, *runs it* when it starts with `import` followed by a space or a tab, and otherwise appends
`line.rstrip()` to `sys.path`. Python 3.13 splits with `str.splitlines()`, which breaks at
`\\n`, `\\r`, `\\x0b`, `\\x0c`, `\\x1c`, `\\x1d`, `\\x1e`, `\\x85`, U+2028 and U+2029 (3.10-3.12
split at `\\n` only, after universal newlines). A path holding any of them (or a NUL, which no
path can hold) would put a second line in the file, which may be an `import` line: refused.
So is a path whose line `site` would not read back as the same path (leading `#` or
`import`, trailing whitespace), and a path that is not absolute (`site` joins it to the
site-packages folder).
"""

from __future__ import annotations

from collections.abc import Iterable

from kernelpack.syntax import UnsafeValue, shown

__all__ = ["LINE_BREAKS", "comment", "path_line", "text"]

#: Every character where some supported Python's `site` ends a `.pth` line, and NUL.
LINE_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\x00")


def _refuse_breaks(value: str, what: str) -> None:
    for char in value:
        if char in LINE_BREAKS:
            raise UnsafeValue(
                f"{what} {shown(value)}: holds {shown(char)}, a line break (or NUL) in a .pth "
                "file, where a next line starting with `import` is code run at every start-up"
            )


def path_line(path: str, *, what: str = "path") -> str:
    """`path` as one `.pth` line (without its newline); `UnsafeValue` when `site` would not
    read it back as exactly this absolute path."""
    _refuse_breaks(path, what)
    if not path.startswith("/"):
        raise UnsafeValue(f"{what} {shown(path)}: not absolute; a .pth line names a folder")
    if path != path.rstrip():
        raise UnsafeValue(f"{what} {shown(path)}: ends in whitespace, which site strips")
    return path


def comment(value: str) -> str:
    """`# value` as one `.pth` line; `UnsafeValue` when it would break out of its line."""
    _refuse_breaks(value, "comment")
    return f"# {value}"


def text(lines: Iterable[str]) -> str:
    """The file: each line (already made by `path_line` or `comment`) ended by a newline;
    `UnsafeValue` for a line holding a break."""
    out = []
    for line in lines:
        _refuse_breaks(line, "line")
        out.append(f"{line}\n")
    return "".join(out)
