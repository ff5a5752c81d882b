"""`kernelpack migrate [PATH] [--force]`: move a kernel-builder project to kernels.toml."""

from __future__ import annotations

import argparse
from pathlib import Path

from kernelpack.project._toml import display_path
from kernelpack.project.buildtoml import BUILD_TOML
from kernelpack.project.locate import locate

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `migrate` verb."""
    parser = subparsers.add_parser(
        "migrate",
        help="move a kernel-builder project (build.toml) to kernels.toml for good",
        description=(
            "Write kernels.toml (and pyproject.toml with build-backend = kernelpack.backend) "
            "for a Hugging Face kernel-builder project: the CUDA sources are copied into "
            "torch-ext/<name>/_ops/csrc/, the library keeps the op namespace the build.toml "
            "build gives it. Existing files are never overwritten without --force."
        ),
    )
    parser.add_argument(
        "path",
        nargs="?",
        type=Path,
        metavar="PATH",
        help="the project's build.toml or its folder (default: the current folder)",
    )
    parser.add_argument("--force", action="store_true", help="overwrite files that exist")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Plan, refuse on conflicts (exit 2, nothing written), write, list what was written."""
    from kernelpack.scaffold import migration

    target = Path.cwd() if args.path is None else Path(args.path)
    if (target / BUILD_TOML).is_file():  # a second run must not take the kernels.toml it wrote
        target = target / BUILD_TOML
    project = locate(target)
    move = migration.plan(project)
    written = move.write(force=args.force)
    for path in written:
        print(f"wrote {display_path(path)}")
    for note in move.notes:
        print(f"note: {note}")
    print(
        f"build it with `kernelpack build {display_path(project.root)}`; build.toml, flake.nix "
        "and the original sources are left as they were"
    )
    return 0
