"""`kernelpack export --hub OUT [PATH] [-j N]`: the Hugging Face Hub layout of this build."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kernelpack.errors import UsageError
from kernelpack.project.locate import PATH_HELP, locate

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `export` verb."""
    parser = subparsers.add_parser(
        "export",
        help="write the Hugging Face Hub layout (kernels.get_kernel loads it)",
        description=(
            "Build the kernels once more under the build's own op namespace and write "
            "OUT/build/<variant>/ for each backend this machine builds: the Python files, "
            "the libraries, the compat folder and metadata.json, as Hugging Face's `kernels` "
            "package loads them (get_kernel, get_local_kernel, LOCAL_KERNELS)."
        ),
    )
    parser.add_argument("--hub", type=Path, metavar="OUT", required=True, help="the export folder")
    parser.add_argument("path", nargs="?", type=Path, metavar="PATH", help=PATH_HELP)
    parser.add_argument("-j", "--jobs", type=int, metavar="N", help="parallel jobs")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from kernelpack.release.hub import export_hub

    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"-j {args.jobs}: expected a positive number of jobs")
    project = locate(args.path)
    if project.found:
        print(f"kernelpack export: using {project.found}", file=sys.stderr)
    for folder in export_hub(project, args.hub, jobs=args.jobs, stream=sys.stderr):
        print(folder)
    return 0
