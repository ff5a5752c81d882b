"""The pytest runner behind `py_gpu_test` (see `defs.bzl`).

Bazel runs the test's main, a one-line stub calling `main()`, with the arguments
`[--prefer-built=PKG ...] -- <test files> [pytest args]`, from the runfiles tree. The runner:

- maps Bazel's test protocol onto pytest: `XML_OUTPUT_FILE` -> `--junitxml`,
  `--test_filter` (`TESTBRIDGE_TEST_ONLY`) -> `-k`; the read-only runfiles -> no cache;
- with `--prefer-built=PKG`, imports PKG from its built copy (the one holding the build
  record `_kernelpack.json`, installed in the image) rather than from the sources Bazel
  staged, which have no native modules. Without a built copy it changes nothing.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from kernelpack_runtime.record import FILENAME

__all__ = ["built_copy", "main", "pytest_args", "shadow_with_built"]


def built_copy(package: str, search_path: Sequence[str]) -> Path | None:
    """The first `search_path` entry holding `<package>/_kernelpack.json`, or None."""
    for entry in search_path:
        folder = Path(entry or ".") / package
        if (folder / FILENAME).is_file():
            return Path(entry or ".")
    return None


def shadow_with_built(packages: Sequence[str], scratch: Path) -> list[str]:
    """Import each package from its built copy; return the packages it found built.

    Only the named packages move: each gets a link `scratch/<package>` to its built copy,
    `scratch` goes first on `sys.path`, and the package is imported at once, so the
    folders pytest later puts in front of `sys.path` (its rootdir, Bazel's runfiles root)
    cannot shadow it. Every other module resolves as before.
    """
    moved = []
    for package in packages:
        entry = built_copy(package, sys.path)
        if entry is None:
            continue
        link = scratch / package
        if not link.exists():
            link.symlink_to((entry / package).resolve(), target_is_directory=True)
        moved.append(package)
    if moved and str(scratch) not in sys.path:
        sys.path.insert(0, str(scratch))
    for package in moved:
        try:
            importlib.import_module(package)
        except Exception as exc:  # pytest reports the import error again, with its traceback
            print(f"kernelpack: importing the built {package} failed: {exc!r}", file=sys.stderr)
    return moved


def pytest_args(test_args: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """pytest's arguments for `test_args` under Bazel's test environment `environ`."""
    args = ["-p", "no:cacheprovider", *test_args]
    junit = environ.get("XML_OUTPUT_FILE")
    if junit:
        args.append(f"--junitxml={junit}")
    selected = environ.get("TESTBRIDGE_TEST_ONLY")
    if selected:
        args += ["-k", selected]
    return args


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kernelpack-pytest-runner", add_help=False)
    parser.add_argument("--prefer-built", action="append", default=[], metavar="PKG")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run pytest for a Bazel test; return its exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    options = _parser().parse_args(argv[:split])
    test_args = argv[split + 1 :]
    scratch = Path(os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp()) / "kernelpack-built"
    scratch.mkdir(parents=True, exist_ok=True)
    shadow_with_built(options.prefer_built, scratch)

    import pytest

    return int(pytest.main(pytest_args(test_args, os.environ)))


if __name__ == "__main__":
    sys.exit(main())
