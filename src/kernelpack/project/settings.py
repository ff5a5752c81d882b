"""`Settings`: a project's package-wide defaults, the `[tool.kernelpack]` table of its
`pyproject.toml`.

```toml
[tool.kernelpack]
manifest = "src/llm_ops/kernels.toml"   # or the package folder; default: found next to pyproject
abi = "stable"                         # default `abi` of every kernel
arch = ["9.0a"]                        # default `arch` (string, array or per-platform table)
env-prefix = "LLM_OPS"                 # <PREFIX>_KERNELS / <PREFIX>_KERNELS_REQUIRE
dist-scheduler = "https://farm.example:10600"  # an sccache-dist farm (KERNELPACK_DIST_*)
dist-token-file = "~/.config/kernelpack/dist-token"
[tool.kernelpack.deps]
mylib = "third_party/mylib/include"    # a folder, relative to the project root
otherlib = "otherlib_headers"          # or an installed Python package (its include/ folder)
[tool.kernelpack.release]
default = "cu130stable2.10"            # the variant `kernelpack index` re-versions for PyPI
index-url = "https://example.org/whl/{cuda}/simple"   # recorded; run-time reasons name it
```
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import urlsplit

from kernelpack.project import dependencies
from kernelpack.project._shell import pattern, unsafe
from kernelpack.project._toml import (
    ARCH_SCHEMA,
    Key,
    Table,
    declared_keys,
    display_path,
    key_metadata,
    quote,
    read_toml,
)
from kernelpack_runtime.arch import Arch

__all__ = [
    "SETTINGS_KEYS",
    "SETTINGS_KEY_DECLARATIONS",
    "ReleaseSettings",
    "Settings",
]

_TABLE = "tool.kernelpack"
_ENV_PREFIX = r"^[A-Za-z_][A-Za-z0-9_]*$"
_ENV_PREFIX_RE = re.compile(_ENV_PREFIX.strip("^$"))
_DEP_NAME = r"^[A-Za-z_][A-Za-z0-9_\-]*$"
_DEP_NAME_RE = re.compile(_DEP_NAME.strip("^$"))
_LABEL = r"^(cu[0-9]{2,4}|cpu)(torch|stable)[0-9][0-9A-Za-z.]*$"
_RELEASE_KEYS = ("default", "index-url")
# An index URL reaches messages, the build record and generated workflows: one plain word.
_URL = r"https?://[^\s\"'`$\\<>]+"


@dataclass(frozen=True)
class ReleaseSettings:
    """`[tool.kernelpack.release]`: how `kernelpack index` publishes the project's wheels."""

    default: str | None = None
    """The variant label (`cu130stable2.10`) whose wheels go to PyPI with the plain version."""
    index_url: str | None = None
    """The variant index users install from; `{cuda}` stands for the CUDA label (`cu130`).
    Recorded in the build record, so a run-time `cuda-mismatch` names the install line."""


@dataclass(frozen=True)
class Settings:
    """The `[tool.kernelpack]` table; every field is optional (the defaults are `Settings()`)."""

    source: Path | None = None
    """Absolute path of the `pyproject.toml` the settings came from (for messages)."""
    manifest: Path | None = field(
        default=None,
        metadata=key_metadata(
            "manifest",
            "path",
            "`<package>/kernels.toml` or `src/<package>/kernels.toml`, found from `[project].name`",
            "the manifest (or the package folder holding it), relative to the project root",
            {"type": "string", "minLength": 1},
        ),
    )
    """Absolute path of `kernels.toml` (or of the package folder holding it)."""
    abi: Literal["torch", "stable"] | None = field(
        default=None,
        metadata=key_metadata(
            "abi",
            '`"torch"` or `"stable"`',
            '`"torch"`',
            "the default `abi` of every kernel",
            {"enum": ["torch", "stable"]},
        ),
    )
    """Default `abi` of every kernel."""
    arch: Mapping[str, tuple[Arch, ...]] | None = field(
        default=None,
        metadata=key_metadata(
            "arch",
            "string, list or per-platform table",
            "none",
            "the default `arch` of every kernel",
            ARCH_SCHEMA,
        ),
    )
    """Default `arch` of every kernel, keyed like `KernelSpec.arch`."""
    env_prefix: str | None = field(
        default=None,
        metadata=key_metadata(
            "env-prefix",
            "identifier",
            "the package name upper-cased",
            "prefix of `<PREFIX>_KERNELS`, `<PREFIX>_KERNELS_REQUIRE` and `<PREFIX>_DISABLE`",
            {"type": "string", "pattern": _ENV_PREFIX},
        ),
    )
    """Prefix of the selection variables; None: the package name upper-cased."""
    deps: Mapping[str, str] = field(
        default_factory=dict,
        metadata=key_metadata(
            "deps",
            "table of name = folder or package",
            "`{}`",
            "header-only dependencies: an include folder relative to the project root, or an "
            "installed Python package (its `include/`)",
            {
                "type": "object",
                "propertyNames": {"pattern": _DEP_NAME},
                "additionalProperties": {"type": "string", "pattern": pattern("path")},
            },
        ),
    )
    """Dependency name -> include folder (relative to the project root) or Python package."""
    release: ReleaseSettings = field(
        default_factory=ReleaseSettings,
        metadata=key_metadata(
            "release",
            "table: default, index-url",
            "`{}`",
            "release channels: `default`, the variant label PyPI gets (`cu130stable2.10`); "
            "`index-url`, the variant index (`https://…/{cuda}/simple`), recorded in the build "
            "record for run-time install hints",
            {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "default": {"type": "string", "pattern": _LABEL},
                    "index-url": {"type": "string", "pattern": f"^{_URL}$"},
                },
            },
        ),
    )
    """`[tool.kernelpack.release]`."""
    dist_scheduler: str | None = field(
        default=None,
        metadata=key_metadata(
            "dist-scheduler",
            "http(s) URL",
            "none (`KERNELPACK_DIST_SCHEDULER` overrides it)",
            "an sccache-dist scheduler: compile on its farm (docs/build.md)",
            {"type": "string", "pattern": "^https?://"},
        ),
    )
    """The farm's scheduler URL; the environment's `KERNELPACK_DIST_SCHEDULER` wins."""
    dist_token_file: str | None = field(
        default=None,
        metadata=key_metadata(
            "dist-token-file",
            "path",
            "none (`KERNELPACK_DIST_TOKEN[_FILE]` override it)",
            "a file holding the farm's client token (`~` expands; relative to the project root)",
            {"type": "string", "minLength": 1},
        ),
    )
    """The file holding the farm's client token (never the token itself: it is a secret)."""

    @property
    def dep_names(self) -> frozenset[str]:
        """Every name `depends` may hold: the built-ins (`cutlass`, the pinned `cutlass_X_Y`)
        and `[tool.kernelpack.deps]`."""
        return frozenset(dependencies.known_names(self.deps))

    @classmethod
    def from_pyproject(
        cls, pyproject: Path, data: Mapping[str, Any] | None = None
    ) -> Settings | None:
        """`pyproject`'s `[tool.kernelpack]`; None when it has no such table. `data`: the
        already-parsed file, else it is read."""
        data = read_toml(pyproject) if data is None else data
        tool = data.get("tool")
        if not isinstance(tool, dict) or "kernelpack" not in tool:
            return None
        return cls.from_table(tool["kernelpack"], pyproject)

    @classmethod
    def from_table(cls, data: object, pyproject: Path) -> Settings:
        """Validate an already-parsed `[tool.kernelpack]` table of `pyproject`."""
        shown = display_path(pyproject)
        if not isinstance(data, dict):
            whole = Table(shown, None, {})
            raise whole.error(_TABLE, "is not a table", "expected a [tool.kernelpack] table")
        table = Table(shown, _TABLE, data)
        table.check_keys(SETTINGS_KEYS)
        manifest = table.string("manifest", expected="a path relative to the project root")
        abi = table.choice("abi", ("torch", "stable"))
        prefix = table.string("env-prefix", expected="an identifier such as LLM_OPS")
        if prefix is not None and not _ENV_PREFIX_RE.fullmatch(prefix):
            raise table.error(
                "env-prefix", f'"{prefix}" is not an identifier', "expected e.g. LLM_OPS"
            )
        scheduler = table.string("dist-scheduler", expected="a URL such as http://10.0.0.5:10600")
        if scheduler is not None and not _is_http_url(scheduler):
            raise table.error(
                "dist-scheduler",
                f"{quote(scheduler)} is not a scheduler URL",
                "expected http(s)://host:port, e.g. http://10.0.0.5:10600",
            )
        token_file = table.string("dist-token-file", expected="a path to the token's file")
        return cls(
            source=pyproject.absolute(),
            manifest=_manifest_path(table, manifest, pyproject.absolute().parent),
            abi=cast('Literal["torch", "stable"] | None', abi),
            arch=table.arch("arch"),
            env_prefix=prefix,
            deps=_deps(shown, data.get("deps")),
            release=_release(shown, data.get("release")),
            dist_scheduler=scheduler,
            dist_token_file=token_file,
        )


def _is_http_url(text: str) -> bool:
    parts = urlsplit(text)
    try:
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _manifest_path(table: Table, manifest: str | None, root: Path) -> Path | None:
    if manifest is None:
        return None
    if Path(manifest).is_absolute():
        raise table.error(
            "manifest", f'"{manifest}" is absolute', "expected a path relative to the project root"
        )
    return root / manifest


def _release(shown: str, value: Any) -> ReleaseSettings:
    if value is None:
        return ReleaseSettings()
    if not isinstance(value, dict):
        raise Table(shown, _TABLE, {}).error(
            "release", "is not a table", "expected a [tool.kernelpack.release] table"
        )
    table = Table(shown, f"{_TABLE}.release", value)
    table.check_keys(_RELEASE_KEYS)
    default = table.string("default", expected="a variant label such as cu130stable2.10")
    if default is not None and not re.fullmatch(_LABEL, default):
        raise table.error(
            "default", f"{quote(default)} is not a variant label", "expected e.g. cu130stable2.10"
        )
    url = table.string("index-url", expected="an http(s) URL, {cuda} for the CUDA label")
    if url is not None and not re.fullmatch(_URL, url):
        raise table.error(
            "index-url",
            f"{quote(url)} is not an http(s) URL",
            "expected e.g. https://example.org/whl/{cuda}/simple",
        )
    return ReleaseSettings(default=default, index_url=url)


def _deps(shown: str, value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Table(shown, _TABLE, {}).error(
            "deps", "is not a table", "expected [tool.kernelpack.deps] name = folder or package"
        )
    table = Table(shown, f"{_TABLE}.deps", value)
    deps: dict[str, str] = {}
    for name in value:
        if not _DEP_NAME_RE.fullmatch(name):
            raise table.error(name, "is not a dependency name", "expected letters, digits, _ or -")
        target = table.string(name, expected="an include folder or a Python package name")
        assert target is not None
        problem = unsafe(target, "path")
        if problem is not None:
            raise table.error(name, f"{quote(target)} {problem}", "expected a plain path")
        if Path(target).is_absolute():
            raise table.error(
                name, f'"{target}" is absolute', "expected a folder relative to the project root"
            )
        deps[name] = target
    return deps


#: Every `[tool.kernelpack]` key, declared on `Settings`' fields, in field order.
SETTINGS_KEY_DECLARATIONS: tuple[Key, ...] = declared_keys(Settings)

#: Keys `[tool.kernelpack]` may hold.
SETTINGS_KEYS: tuple[str, ...] = tuple(key.name for key in SETTINGS_KEY_DECLARATIONS)
