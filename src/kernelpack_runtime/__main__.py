"""`python -m kernelpack_runtime status PKG [--json] [--require]`, where only the runtime is
installed: the status table of `kernelpack status`, with its exit codes.

PKG is an importable package name. Exit 0 with a report; 1 when the package has no usable
build record, or, under `--require`, when any kernel is unavailable; 2 for a PKG that names
no installed package (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

__all__ = ["main"]

_PROG = "python -m kernelpack_runtime"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_PROG, description="The run-time side of kernelpack: kernel status on this machine."
    )
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    status = sub.add_parser(
        "status",
        help="which kernels of a package are usable on this machine, and why not",
        description="Show the run-time status of every kernel of an installed package.",
    )
    status.add_argument("package", metavar="PKG", help="an importable package name (llm_ops)")
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.add_argument(
        "--require", action="store_true", help="exit 1 when any kernel is unavailable"
    )
    return parser


def _fail(message: str, code: int, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"error": {"code": code, "message": message}}, indent=2))
    print(f"{_PROG} status: error: {message}", file=sys.stderr)
    return code


def status(package: str, *, as_json: bool, require: bool) -> int:
    """Print `package`'s status table (or JSON); the exit code of the module docstring."""
    from kernelpack_runtime.registry import registry_for
    from kernelpack_runtime.status import PackageStatus, render_text

    if not all(part.isidentifier() for part in package.split(".")):
        return _fail(f"{package}: not a package name", 2, as_json)
    registry = registry_for(package)
    if registry.location is None:
        return _fail(f"{package}: no such package for {sys.executable}", 2, as_json)
    if registry.record is None and not registry.record_invalid:
        return _fail(registry.record_problem or f"{package}: no build record", 1, as_json)
    report = PackageStatus.of(registry)
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
    elif report.kernels:
        from kernelpack_runtime.device import default_probe

        sys.stdout.write(render_text(report, caption=f"device {default_probe().describe()}"))
    if registry.record_invalid:
        print(f"{_PROG} status: error: {registry.record_problem}", file=sys.stderr)
        return 1
    if require and not all(kernel.available for kernel in report.kernels):
        unavailable = ", ".join(k.name for k in report.kernels if not k.available)
        print(f"{_PROG} status: unavailable under --require: {unavailable}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    args = _parser().parse_args(argv)
    return status(args.package, as_json=args.json, require=args.require)


if __name__ == "__main__":
    sys.exit(main())
