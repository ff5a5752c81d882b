"""`kernelpack pin`: the `[tool.uv.sources]` lines for built wheels, or check pins against a lock.

    kernelpack pin dist/*.whl --url-base https://github.com/o/r/releases/download/v0.8.0
    kernelpack pin --check pyproject.toml [--lock uv.lock]

The first prints the entry ready to paste (one URL per platform); the second exits 1 with one
line per pinned kernel wheel whose torch does not match the torch in `uv.lock`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kernelpack.errors import UsageError
from kernelpack.project._toml import display_path
from kernelpack.release.pins import Wheel, check_pins, pins, render_sources

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `pin` verb."""
    parser = subparsers.add_parser(
        "pin",
        help="print [tool.uv.sources] pins for built wheels, or check pins against uv.lock",
        description=(
            "Print the [tool.uv.sources] entry that pins installs at built wheels (one URL per "
            "platform), or with --check verify that pinned kernel wheels match uv.lock's torch."
        ),
    )
    parser.add_argument(
        "wheels", nargs="*", metavar="WHEEL", help="built wheels (files, names or folders)"
    )
    parser.add_argument("--url-base", metavar="URL", help="where the wheels are published")
    parser.add_argument(
        "--check", type=Path, metavar="PYPROJECT", help="check the pins of this pyproject.toml"
    )
    parser.add_argument(
        "--lock", type=Path, metavar="LOCK", help="the uv.lock (default: next to PYPROJECT)"
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print pins (exit 0), or check them (exit 1 on a mismatch); bad input exits 2."""
    if args.check is not None:
        if args.wheels or args.url_base:
            raise UsageError("--check takes no WHEEL arguments and no --url-base")
        return _check(args.check, args.lock, as_json=args.json)
    if args.lock is not None:
        raise UsageError("--lock goes with --check")
    if not args.wheels:
        raise UsageError("give at least one WHEEL (or --check PYPROJECT)")
    if not args.url_base:
        raise UsageError("--url-base URL is required: where the wheels are published")
    entries = pins([Wheel.parse(str(w)) for w in _wheel_files(args.wheels)], args.url_base)
    if args.json:
        print(json.dumps({"sources": [pin.to_json() for pin in entries]}, indent=2))
    else:
        print(render_sources(entries), end="")
    return 0


def _wheel_files(arguments: list[str]) -> list[str]:
    """WHEEL arguments with folders replaced by the wheels in them."""
    found = []
    for argument in arguments:
        folder = Path(argument)
        if folder.is_dir():
            wheels = sorted(str(path) for path in folder.glob("*.whl"))
            if not wheels:
                raise UsageError(f"{display_path(folder)}: no .whl files in this folder")
            found += wheels
        else:
            found.append(argument)
    return found


def _check(pyproject: Path, lock: Path | None, *, as_json: bool) -> int:
    if not pyproject.is_file():
        raise UsageError(f"{display_path(pyproject)}: does not exist")
    lock = lock if lock is not None else pyproject.parent / "uv.lock"
    if not lock.is_file():
        raise UsageError(f"{display_path(lock)}: does not exist; run `uv lock` or pass --lock")
    torches, checks = check_pins(pyproject, lock)
    failed = [check for check in checks if not check.ok]
    if as_json:
        report = {
            "ok": not failed,
            "torch": [str(t) for t in torches],
            "pins": [check.to_json() for check in checks],
        }
        print(json.dumps(report, indent=2))
    else:
        for check in failed:
            print(f"{check.package}: {check.problem}")
        if not failed:
            locked = ", ".join(str(t) for t in torches)
            print(f"{len(checks)} kernel wheel pin(s) match torch {locked} in {display_path(lock)}")
    return 1 if failed else 0
