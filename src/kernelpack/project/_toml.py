"""Reading TOML tables into typed values, with one-line `ManifestError`s.

Shared by `kernelpack.project.manifest` (`kernels.toml`) and `kernelpack.project.settings`
(`[tool.kernelpack]`): both report errors as `<path>: [<table>].<key>: <problem>; <expected>`.
"""

from __future__ import annotations

import dataclasses
import datetime
import difflib
import os
import re
import stat
import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from kernelpack.errors import ManifestError
from kernelpack_runtime.arch import KNOWN_ARCHS, Arch, InvalidArch

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

__all__ = [
    "ANY_PLATFORM",
    "ARCH_SCHEMA",
    "MAX_BYTES",
    "MAX_ITEMS",
    "PLATFORMS",
    "Document",
    "Key",
    "Table",
    "declared_keys",
    "describe",
    "display_path",
    "is_inside",
    "key_metadata",
    "path_too_long",
    "quote",
    "read_document",
    "read_toml",
]

#: Platform names (`platform.machine()`) a manifest or the settings may name.
PLATFORMS = ("x86_64", "aarch64")

#: Key of an arch mapping when the arch applies to every platform.
ANY_PLATFORM = "*"

_ARCH = {"type": "string", "enum": [str(a) for a in sorted(KNOWN_ARCHS)]}
_ARCHS = {"anyOf": [_ARCH, {"type": "array", "items": _ARCH, "minItems": 1}]}

#: JSON Schema of what `Table.arch` reads: an arch, a list, or a per-platform table of them.
ARCH_SCHEMA: Mapping[str, Any] = {
    "anyOf": [
        *_ARCHS["anyOf"],
        {
            "type": "object",
            "properties": {platform: _ARCHS for platform in PLATFORMS},
            "additionalProperties": False,
            "minProperties": 1,
        },
    ]
}

#: Largest TOML file read (a manifest is a few KiB; parsing 1 MiB takes about 0.1 s).
MAX_BYTES = 1024 * 1024

#: Most items an array may hold (paths, flags): checking each touches the disk or the shell.
MAX_ITEMS = 10_000

_POSITION_RE = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")
_HEADER_RE = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?")
_KEY_RE = re.compile(r"^\s*([A-Za-z0-9_\-\"'.]+?)\s*=")


def display_path(path: Path) -> str:
    """`path` for a one-line message: relative to the working folder when it lies below it,
    control characters (a newline in a folder name) escaped."""
    try:
        shown = str(path.relative_to(Path.cwd()))
    except ValueError:
        shown = str(path)
    if shown.isprintable():
        return shown
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in shown)


def describe(value: object) -> str:
    """How a TOML value is named in messages: `a string ("9.5")`, `an integer (3)`."""
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, str):
        return f"a string ({quote(value)})"
    if isinstance(value, int):
        return f"an integer ({value})" if abs(value) < 10**30 else "a very large integer"
    if isinstance(value, float):
        return f"a float ({value})"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, (datetime.date, datetime.time)):
        return f"a date/time ({value})"
    return type(value).__name__  # pragma: no cover - TOML has no other types


def quote(text: str) -> str:
    """`text` as a TOML basic string, cut to 60 characters, control characters escaped."""
    shown = text if len(text) <= 60 else text[:57] + "..."
    shown = shown.replace("\\", "\\\\").replace('"', '\\"')
    if not shown.isprintable():
        shown = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in shown)
    return '"' + shown + '"'


@dataclass(frozen=True)
class Key:
    """The declaration of one key of a TOML table, put in the metadata of the dataclass field
    that holds its value: the key lists, the docs tables and the JSON Schemas are made from
    these declarations (`kernelpack.project._schema`)."""

    name: str
    """The TOML key, e.g. `nvcc-flags`."""
    type: str
    """The value's type, as the docs table writes it (Markdown)."""
    default: str
    """The default, as the docs table writes it (Markdown)."""
    doc: str
    """What it means, one line (Markdown)."""
    schema: Mapping[str, Any]
    """The value's JSON Schema (draft 7)."""
    required: bool = False
    """Required in every table (the schema's `required`)."""


def key_metadata(
    name: str, type: str, default: str, doc: str, schema: Mapping[str, Any], **kw: bool
) -> dict[str, Key]:
    """`field(metadata=key_metadata(...))`: declare the field's TOML key."""
    return {"key": Key(name, type, default, doc, schema, **kw)}


def declared_keys(cls: Any) -> tuple[Key, ...]:
    """The `Key`s declared on the fields of dataclass `cls`, in field order."""
    return tuple(f.metadata["key"] for f in dataclasses.fields(cls) if "key" in f.metadata)


@dataclass(frozen=True)
class Document:
    """A parsed TOML file and where its tables and keys start (for ordering messages)."""

    shown: str
    data: dict[str, Any]
    text: str

    def line(self, table: str | None, key: str | None = None) -> int:
        """The line (1-based) where `[table]`'s `key` (its first part) is set, else where
        `[table]` starts; past the end of the file when neither is found."""
        lines = self._lines()
        first_key = None if key is None else key.split(".", 1)[0]
        if table is not None and first_key is not None and (table, first_key) in lines:
            return lines[table, first_key]
        return lines.get((table, None), len(self.text) + 1)

    def _lines(self) -> dict[tuple[str | None, str | None], int]:
        cached: dict[tuple[str | None, str | None], int] | None = self.__dict__.get("_cache")
        if cached is not None:
            return cached
        found: dict[tuple[str | None, str | None], int] = {}
        table: str | None = None
        for number, text in enumerate(self.text.splitlines(), start=1):
            header = _HEADER_RE.match(text)
            if header:
                parts = [p.strip().strip("\"'") for p in header.group(1).split(".")]
                table = parts[0]
                found.setdefault((table, None), number)
                if len(parts) > 1:
                    found.setdefault((table, parts[1]), number)
                continue
            key = _KEY_RE.match(text)
            if key:
                parts = [p.strip().strip("\"'") for p in key.group(1).split(".")]
                if table is None:
                    found.setdefault((parts[0], None), number)
                    if len(parts) > 1:
                        found.setdefault((parts[0], parts[1]), number)
                else:
                    found.setdefault((table, parts[0]), number)
        object.__setattr__(self, "_cache", found)
        return found


def read_toml(path: Path, *, max_bytes: int | None = None) -> dict[str, Any]:
    """Parse `path`; a syntax error names its line, column and (when known) table and key."""
    return read_document(path, max_bytes=max_bytes).data


def read_document(path: Path, *, max_bytes: int | None = None) -> Document:
    """Parse `path`, keeping its text; any problem is one `ManifestError` line. `max_bytes`:
    refuse a larger file before reading it (manifests: `MAX_BYTES`; a uv.lock may be larger)."""
    shown = display_path(path)
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise ManifestError(shown, "is not a regular file", expected="expected a TOML file")
        if max_bytes is not None and info.st_size > max_bytes:
            size = info.st_size / 1024 / 1024
            raise ManifestError(
                shown,
                f"is {size:.1f} MiB",
                expected=f"expected a TOML file of at most {max_bytes / 1024 / 1024:g} MiB",
            )
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
    except RecursionError:
        raise ManifestError(
            shown, "invalid TOML: arrays or tables nest too deeply", expected="expected valid TOML"
        ) from None
    except ValueError as exc:  # an integer past Python's 4300-digit conversion limit
        problem = str(exc).split(":", 1)[0].split(";", 1)[0].strip().lower()
        raise ManifestError(
            shown, f"invalid TOML: {problem}", expected="expected valid TOML"
        ) from None
    return Document(shown=shown, data=data, text=text)


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
        for error in self.unknown_keys(known):
            raise error

    def unknown_keys(self, known: Collection[str]) -> list[ManifestError]:
        """One error per key not in `known`, each suggesting the closest known one."""
        errors = []
        for key in self.data:
            if key in known:
                continue
            close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
            if not close:
                close = [k for k in known if k.replace("-", "_") == key.replace("-", "_")]
            expected = f'did you mean "{close[0]}"?' if close else None
            if expected is None:
                expected = "known keys: " + ", ".join(sorted(known))
            errors.append(self.error(key, "unknown key", expected))
        return errors

    def string(self, key: str, *, expected: str = "a string") -> str | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.error(key, f"got {describe(value)}", f"expected {expected}")
        self.check_text(key, value, expected)
        return value

    def check_text(self, key: str, value: str, expected: str) -> None:
        """Reject a string holding a control character: every value kernelpack reads is one
        line (build.ninja and the compilers' shells take one command per line)."""
        if value.isprintable():
            return
        bad = next(c for c in value if not c.isprintable())
        raise self.error(
            key,
            f"{quote(value)} holds a control character ({ascii(bad)[1:-1]})",
            f"expected {expected} on one line, with no control characters",
        )

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
        if len(value) > MAX_ITEMS:
            raise self.error(
                key, f"holds {len(value)} items", f"expected at most {MAX_ITEMS} {expected}"
            )
        for item in value:
            if not isinstance(item, str):
                raise self.error(key, f"holds {describe(item)}", f"expected an array of {expected}")
            if not item.strip():
                raise self.error(key, "holds an empty string", f"expected an array of {expected}")
            self.check_text(key, item, expected)
        if not value and not allow_empty:
            raise self.error(key, "is empty", f"expected a non-empty array of {expected}")
        return tuple(value)

    def choice(self, key: str, choices: Collection[str]) -> str | None:
        value = self.string(key, expected=_one_of(choices))
        if value is not None and value not in choices:
            raise self.error(key, f"{quote(value)} is not allowed", f"expected {_one_of(choices)}")
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
            raise self.error(key, f"{quote(value)} is not a version", expected)
        try:
            return Version(value)
        except InvalidVersion:  # pragma: no cover - the pattern above admits only versions
            raise self.error(key, f"{quote(value)} is not a version", expected) from None

    def platforms(self, key: str) -> tuple[str, ...] | None:
        value = self.data.get(key)
        if value is None:
            return None
        expected = "platform names (" + ", ".join(f'"{p}"' for p in PLATFORMS) + ")"
        names = self.strings(key, expected=expected, allow_empty=False)
        for name in names:
            if name not in PLATFORMS:
                raise self.error(key, f"unknown platform {quote(name)}", _did_you_mean(name))
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
            except InvalidArch as exc:
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


#: Longest file name (bytes) and path (bytes) Linux file systems take (NAME_MAX, PATH_MAX).
_NAME_MAX = 255
_PATH_MAX = 4095


def path_too_long(entry: str) -> str | None:
    """Why no file system here can hold path `entry` (a part over 255 bytes, the whole over
    4095), None when it fits: such a name is refused, never handed to `stat` (which raises
    "File name too long")."""
    encoded = entry.encode("utf-8", "surrogateescape")
    if len(encoded) > _PATH_MAX:
        return f"is {len(encoded)} bytes long, longer than any path can be ({_PATH_MAX})"
    for part in encoded.split(b"/"):
        if len(part) > _NAME_MAX:
            return (
                f"holds a name of {len(part)} bytes, longer than any file name can be ({_NAME_MAX})"
            )
    return None
