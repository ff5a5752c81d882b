"""`kernelpack build [PATH] [--wheel-dir DIR | --inplace] [--kernels a,b] [--require] [-j N]
[--allow-nearest] [-v | -q]`."""

from __future__ import annotations

import argparse
import os
import sys
from functools import partial
from pathlib import Path

from kernelpack.errors import UsageError
from kernelpack.plan import parse_kernels
from kernelpack.project.locate import PATH_HELP, locate
from kernelpack.toolchain.deps import ALLOW_NEAREST_HELP, allowing_nearest

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `build` verb."""
    parser = subparsers.add_parser(
        "build",
        help="compile the kernels and write a wheel (or build in place)",
        description=(
            "Compile every planned kernel of the package through one ninja graph and write "
            "a wheel (default: <project>/dist) or, with --inplace, install the libraries "
            "and the build record into the package folder."
        ),
    )
    parser.add_argument("path", nargs="?", type=Path, metavar="PATH", help=PATH_HELP)
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--wheel-dir",
        type=Path,
        metavar="DIR",
        help="where the wheel goes (default: <project>/dist)",
    )
    where.add_argument("--inplace", action="store_true", help="install into the source tree")
    parser.add_argument("--kernels", default=None, metavar="a,b", help="build only these")
    parser.add_argument(
        "--require", action="store_true", default=None, help="every skip is an error"
    )
    parser.add_argument(
        "-j", "--jobs", type=int, metavar="N", help="parallel jobs (default: cores and memory)"
    )
    parser.add_argument("--allow-nearest", action="store_true", help=ALLOW_NEAREST_HELP)
    loudness = parser.add_mutually_exclusive_group()
    loudness.add_argument(
        "-v", "--verbose", action="store_true", help="print each command as ninja runs it"
    )
    loudness.add_argument(
        "-q", "--quiet", action="store_true", help="print only errors and the result"
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from kernelpack.backend.metadata import validate_project
    from kernelpack.builder import engine, install
    from kernelpack.cli import _render as report

    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"-j {args.jobs}: expected a positive number of jobs")
    kernels = None if args.kernels is None else parse_kernels(args.kernels, "--kernels")
    project = locate(args.path)
    if project.found:
        print(f"kernelpack build: using {project.found}", file=sys.stderr)
    validate_project(project)
    output: engine.Output = "verbose" if args.verbose else "quiet" if args.quiet else "normal"
    result = engine.build_project(
        project,
        kernels=kernels,
        require=args.require,
        jobs=args.jobs,
        environ=allowing_nearest(os.environ) if args.allow_nearest else None,
        stream=sys.stderr,
        output=output,
        announce=partial(report.settings_line, verbose=output == "verbose"),
    )
    console = report.console(stderr=True)
    summary = report.print_result_line if args.quiet else report.print_summary
    if args.inplace:
        install.install_inplace(result)
        summary(result, console)
        return 0
    from kernelpack.backend.wheel import write_wheel

    path = write_wheel(project, result, args.wheel_dir or project.root / "dist")
    if args.quiet:
        report.print_result_line(result, console)
    else:
        report.print_summary(result, console, wheel=path)
    print(path)
    return 0
