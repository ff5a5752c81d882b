"""`kernelpack bazel init PKG [--check]`: the Bazel files of a kernel package, and their check.

Writes the package's `BUILD.bazel` (a `kernel_py_library` and one `py_gpu_test` per GPU test
file), adds its `csrc` folders to the workspace's `.bazelignore` and copies kernelpack's
`defs.bzl` into the workspace. Running it again changes nothing. With `--check` it writes
nothing: exit 1 with a unified diff when a file is stale, 0 when all are fresh.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kernelpack.bazel.generator import DEFAULT_RULES_DIR, diff, find_workspace, generate, write
from kernelpack.errors import UsageError
from kernelpack.project.locate import locate

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `kernelpack bazel` and its `init` subcommand."""
    parser = subparsers.add_parser(
        "bazel",
        help="Bazel files for a kernel package (Bazel manages its Python layer only)",
        description="Bazel files for a kernel package: Bazel manages the Python layer; "
        "the native modules come from the image.",
    )
    verbs = parser.add_subparsers(dest="bazel_verb", metavar="SUBCOMMAND", required=True)
    init = verbs.add_parser(
        "init",
        help="write BUILD.bazel, .bazelignore and defs.bzl (or check them with --check)",
        description="Write the kernel package's BUILD.bazel, add its csrc folders to "
        ".bazelignore and copy kernelpack's defs.bzl into the workspace.",
    )
    init.add_argument(
        "path",
        metavar="PKG",
        type=Path,
        help="kernels.toml, the package folder holding it, or its project folder",
    )
    init.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 with a diff when a file is stale, 0 when all are fresh",
    )
    init.add_argument(
        "--workspace",
        type=Path,
        metavar="DIR",
        help="the Bazel workspace root (default: the nearest folder above PKG with "
        "MODULE.bazel, REPO.bazel or WORKSPACE)",
    )
    init.add_argument(
        "--rules-dir",
        default=DEFAULT_RULES_DIR,
        metavar="DIR",
        help=f"where defs.bzl goes, relative to the workspace (default: {DEFAULT_RULES_DIR})",
    )
    init.add_argument(
        "--dep",
        action="append",
        default=[],
        metavar="LABEL",
        help="a Bazel dependency of the library (repeatable), e.g. @pypi//numpy; give the "
        "same ones to --check",
    )
    init.set_defaults(func=_init)


def _init(args: argparse.Namespace) -> int:
    project = locate(args.path)
    workspace = args.workspace or find_workspace(project.root.resolve())
    if workspace is None:
        raise UsageError(
            f"{project.root}: no Bazel workspace (MODULE.bazel, REPO.bazel, WORKSPACE) "
            "at or above it; pass --workspace DIR"
        )
    files = generate(project, Path(workspace), rules_dir=args.rules_dir, deps=args.dep)
    if args.check:
        stale = [(file, diff(file)) for file in files]
        stale = [(file, text) for file, text in stale if text]
        for _, text in stale:
            sys.stdout.write(text)
        if stale:
            names = ", ".join(file.shown for file, _ in stale)
            print(
                f"kernelpack bazel init: stale: {names}; run `kernelpack bazel init {args.path}`",
                file=sys.stderr,
            )
            return 1
        print(f"kernelpack bazel init: {len(files)} files up to date")
        return 0
    for file in files:
        print(f"{'wrote' if write(file) else 'unchanged'} {file.shown}")
    return 0
