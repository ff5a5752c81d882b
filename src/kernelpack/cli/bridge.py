"""`kernelpack bridge --venv VENV [--python PY] [--remove] [--process-pth] [--json]`.

Writes (or removes) a `.pth` file in PY's purelib that makes VENV's site-packages visible to
PY, e.g. the system interpreter Bazel runs tests with, when the image installed everything
into a venv. See `kernelpack.bazel.bridge`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kernelpack.bazel.bridge import bridge, default_python, unbridge

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `kernelpack bridge`."""
    parser = subparsers.add_parser(
        "bridge",
        help="make a venv's packages visible to another interpreter (a .pth file)",
        description="Write a .pth file into PY's purelib listing VENV's site-packages, so "
        "PY (e.g. the system Python that Bazel's include_system_site_packages exposes) "
        "imports what VENV has installed. Same Python minor version and ABI only.",
    )
    parser.add_argument("--venv", required=True, type=Path, metavar="VENV", help="the venv")
    parser.add_argument(
        "--python",
        metavar="PY",
        help="the interpreter that should see VENV's packages (default: python3 on PATH)",
    )
    parser.add_argument("--remove", action="store_true", help="remove the bridge instead")
    parser.add_argument(
        "--process-pth",
        action="store_true",
        help="also carry over VENV's own .pth files (editable installs): their path lines "
        "and their import lines",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    python = args.python or default_python()
    if args.remove:
        result = unbridge(args.venv, python)
    else:
        result = bridge(args.venv, python, process_pth=args.process_pth)
    if args.json:
        print(json.dumps({"venv": str(args.venv), "python": python, **result.to_json()}))
    elif result.action in ("wrote", "unchanged"):
        extra = f", {result.imports} import lines" if result.imports else ""
        print(f"{result.action} {result.path} ({len(result.paths)} paths{extra}) for {python}")
    else:
        print(f"{result.action} {result.path}")
    return 0
