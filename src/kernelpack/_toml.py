"""Reading TOML tables into typed values, with one-line `ManifestError`s.

Shared by `kernelpack.manifest` (`kernels.toml`) and `kernelpack.settings`
(`[tool.kernelpack]`): both report errors as `<path>: [<table>].<key>: <problem>; <expected>`.
"""

from __future__ import annotations

import datetime
import difflib
import os
import re
import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from kernelpack.errors import ManifestError
from kernelpack_runtime.arch import Arch

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

__all__ = [
    "ANY_PLATFORM",
    "PLATFORMS",
    "Table",
    "describe",
    "display_path",
    "is_inside",
    "read_toml",
]

#: Platform names (`platform.machine()`) a manifest or the settings may name.
PLATFORMS = ("x86_64", "aarch64")

#: Key of an arch mapping when the arch applies to every platform.
ANY_PLATFORM = "*"

_POSITION_RE = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")
_HEADER_RE = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?")
_KEY_RE = re.compile(r"^\s*([A-Za-z0-9_\-\"'.]+?)\s*=")


def display_path(path: Path) -> str:
    """`path` relative to the working folder when it lies below it (short messages)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def describe(value: object) -> str:
    """How a TOML value is named in messages: `a string ("9.5")`, `an integer (3)`."""
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, str):
        return f"a string ({_quote(value)})"
    if isinstance(value, int):
        return f"an integer ({value})"
    if isinstance(value, float):
        return f"a float ({value})"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, (datetime.date, datetime.time)):
        return f"a date/time ({value})"
    return type(value).__name__  # pragma: no cover - TOML has no other types


def _quote(text: str) -> str:
    shown = text if len(text) <= 60 else text[:57] + "..."
    return '"' + shown.replace("\\", "\\\\").replace('"', '\\"') + '"'


def read_toml(path: Path) -> dict[str, Any]:
    """Parse `path`; a syntax error names its line, column and (when known) table and key."""
    shown = display_path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError(shown, "file does not exist") from None
    except UnicodeDecodeError as exc:
        raise ManifestError(
            shown, f"not UTF-8 text ({exc.reason})", expected="expected a TOML file"
        ) from None
    except OSError as exc:
        raise ManifestError(shown, f"cannot be read ({exc.strerror})") from None
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _syntax_error(shown, text, str(exc)) from None
    return data


def _syntax_error(shown: str, text: str, message: str) -> ManifestError:
    match = _POSITION_RE.search(message)
    problem = message[: match.start()] if match else message
    problem = problem.strip().rstrip(".")
    problem = problem[:1].lower() + problem[1:]
    if problem.startswith(("cannot overwrite a value", "cannot declare")):
        problem = f"duplicate key or table ({problem})"
    if match is None:
        return ManifestError(shown, f"invalid TOML: {problem}", expected="expected valid TOML")
    line, column = int(match.group(1)), int(match.group(2))
    table, key = _locate(text, line)
    where = f"invalid TOML at line {line}, column {column}: {problem}"
    return ManifestError(shown, where, kernel=table, key=key, expected="expected valid TOML")


def _locate(text: str, line: int) -> tuple[str | None, str | None]:
    """The table header above `line` and the key assigned on it (best effort, for messages)."""
    lines = text.splitlines()
    key = None
    if 0 < line <= len(lines):
        key_match = _KEY_RE.match(lines[line - 1])
        if key_match and not _HEADER_RE.match(lines[line - 1]):
            key = key_match.group(1)
    table = None
    for candidate in reversed(lines[: max(line - 1, 0)]):
        header = _HEADER_RE.match(candidate)
        if header:
            table = header.group(1)
            break
    if table is None and line <= len(lines):
        header = _HEADER_RE.match(lines[line - 1]) if line > 0 else None
        table = header.group(1) if header else None
    return table, key


@dataclass(frozen=True)
class Table:
    """One TOML table being read: reports errors as `<path>: [<name>].<key>: …`."""

    path: str
    """The file as shown in messages."""
    name: str | None
    """The table's name in messages (a kernel, `tool.kernelpack`), None for the top level."""
    data: Mapping[str, Any]

    def error(self, key: str | None, problem: str, expected: str | None = None) -> ManifestError:
        """A `ManifestError` for `key` of this table."""
        if self.name is None:
            return ManifestError(self.path, problem, key=key, expected=expected)
        return ManifestError(self.path, problem, kernel=self.name, key=key, expected=expected)

    def check_keys(self, known: Collection[str]) -> None:
        """Reject keys not in `known`, suggesting the closest known one."""
        for key in self.data:
            if key in known:
                continue
            close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
            if not close:
                close = [k for k in known if k.replace("-", "_") == key.replace("-", "_")]
            expected = f'did you mean "{close[0]}"?' if close else None
            if expected is None:
                expected = "known keys: " + ", ".join(sorted(known))
            raise self.error(key, "unknown key", expected)

    def string(self, key: str, *, expected: str = "a string") -> str | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.error(key, f"got {describe(value)}", f"expected {expected}")
        return value

    def boolean(self, key: str) -> bool | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, bool):
            raise self.error(key, f"got {describe(value)}", "expected true or false")
        return value

    def strings(self, key: str, *, expected: str, allow_empty: bool = True) -> tuple[str, ...]:
        """An array of strings, order kept."""
        value = self.data.get(key)
        if value is None:
            return ()
        if not isinstance(value, list):
            raise self.error(key, f"got {describe(value)}", f"expected an array of {expected}")
        for item in value:
            if not isinstance(item, str):
                raise self.error(key, f"holds {describe(item)}", f"expected an array of {expected}")
            if not item.strip():
                raise self.error(key, "holds an empty string", f"expected an array of {expected}")
        if not value and not allow_empty:
            raise self.error(key, "is empty", f"expected a non-empty array of {expected}")
        return tuple(value)

    def choice(self, key: str, choices: Collection[str]) -> str | None:
        value = self.string(key, expected=_one_of(choices))
        if value is not None and value not in choices:
            raise self.error(key, f"{_quote(value)} is not allowed", f"expected {_one_of(choices)}")
        return value

    def version(self, key: str, *, example: str) -> Version | None:
        """A dotted release such as "12.8" (written as a string: TOML floats lose "2.10")."""
        value = self.data.get(key)
        if value is None:
            return None
        expected = f'expected a version string such as "{example}"'
        if not isinstance(value, str):
            raise self.error(key, f"got {describe(value)}", expected)
        if not re.fullmatch(r"\d+(\.\d+){1,2}", value.strip()):
            raise self.error(key, f"{_quote(value)} is not a version", expected)
        try:
            return Version(value)
        except InvalidVersion:  # pragma: no cover - the pattern above admits only versions
            raise self.error(key, f"{_quote(value)} is not a version", expected) from None

    def platforms(self, key: str) -> tuple[str, ...] | None:
        value = self.data.get(key)
        if value is None:
            return None
        expected = "platform names (" + ", ".join(f'"{p}"' for p in PLATFORMS) + ")"
        names = self.strings(key, expected=expected, allow_empty=False)
        for name in names:
            if name not in PLATFORMS:
                raise self.error(key, f"unknown platform {_quote(name)}", _did_you_mean(name))
        return tuple(dict.fromkeys(names))

    def arch(self, key: str) -> Mapping[str, tuple[Arch, ...]] | None:
        """`"9.0a"`, `["8.0", "9.0a"]` or `{ x86_64 = [...], aarch64 = "10.0a" }`.

        Returns platform (or `ANY_PLATFORM`) -> sorted, de-duplicated archs.
        """
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, dict):
            if not value:
                raise self.error(
                    key, "is an empty table", f"expected archs for {_one_of(PLATFORMS)}"
                )
            table: dict[str, tuple[Arch, ...]] = {}
            for platform, archs in value.items():
                if platform not in PLATFORMS:
                    raise self.error(
                        f"{key}.{platform}", "unknown platform", _did_you_mean(platform)
                    )
                table[platform] = self._archs(f"{key}.{platform}", archs)
            return table
        return {ANY_PLATFORM: self._archs(key, value)}

    def _archs(self, key: str, value: object) -> tuple[Arch, ...]:
        expected = 'expected an arch string such as "9.0a", or an array of them'
        items: list[object]
        if isinstance(value, str):
            items = [value]
        elif isinstance(value, list):
            items = list(value)
        else:
            raise self.error(key, f"got {describe(value)}", expected)
        if not items:
            raise self.error(key, "is empty", "expected at least one arch")
        archs: set[Arch] = set()
        for item in items:
            if not isinstance(item, str):
                raise self.error(key, f"holds {describe(item)}", expected)
            try:
                archs.add(Arch.parse(item))
            except ValueError as exc:
                raise self.error(key, str(exc)) from None
        return tuple(sorted(archs))


def _one_of(choices: Collection[str]) -> str:
    quoted = [f'"{c}"' for c in choices]
    if len(quoted) == 1:
        return quoted[0]
    return "one of " + ", ".join(quoted)


def _did_you_mean(name: str) -> str:
    close = difflib.get_close_matches(name, PLATFORMS, n=1, cutoff=0.5)
    hint = f'did you mean "{close[0]}"? ' if close else ""
    return f"{hint}expected {_one_of(PLATFORMS)}"


def is_inside(path: Path, root: Path) -> bool:
    """Whether `path` lies in `root` (both absolute), lexically."""
    return os.path.commonpath([path, root]) == str(root)
