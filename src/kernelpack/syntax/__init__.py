"""How a value is written into each language kernelpack generates, one module per language.

Every generator (the editable wheel's and the bridge's `.pth` files, the Bazel BUILD files, the
CI workflow, migrated and pinned TOML, scaffolded projects) writes values it did not choose
(folder names, file names, versions from a lock file, command-line flags) through these
helpers. Each escapes a value so that the language's own parser reads back exactly that
value, or refuses it with `UnsafeValue` when the language cannot hold it safely:

- `toml`: basic strings (every Unicode character written as itself), arrays, inline tables;
- `yaml`: double-quoted scalars, no GitHub Actions expression (`${{`) inside them;
- `starlark`: string literals and comments of BUILD files;
- `pth`: lines of a `.pth` file, which `site` splits at every line break `str.splitlines()`
  knows and runs when they start with `import`.
"""

from __future__ import annotations

from kernelpack.errors import UsageError

__all__ = ["UnsafeValue", "shown"]


class UnsafeValue(UsageError):
    """A value the target language cannot hold safely (exit code 2)."""


def shown(value: str) -> str:
    """`value` for a one-line message: quoted, every non-printable character escaped."""
    return ascii(value) if not value.isprintable() else repr(value)
