"""The `kernelpack` command: one module per verb under `kernelpack.cli`.

Each verb module exposes `register(subparsers)`, which adds its parser and sets
`func=<callable(args) -> int>`. Errors derived from `KernelpackError` are printed as one line
on stderr with their exit code (2 bad input, 1 failure of the thing checked); no traceback.
An `OSError` (a full disk) is one line with exit 1. Under `--json` the failure is also printed
on stdout as `{"error": {"message": ..., "exit_code": ...}}`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import signal
import sys
from collections.abc import Sequence

from kernelpack import __version__
from kernelpack.errors import Interrupted, KernelpackError
from kernelpack.processes import raise_on_signals

__all__ = ["main"]

#: Verb modules, in help order. A verb whose module is not there yet is left out.
_VERBS = (
    "check",
    "doctor",
    "build",
    "status",
    "new",
    "migrate",
    "index",
    "export",
    "pin",
    "contract",
    "bazel",
    "bridge",
    "ci",
    "toolchain",
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelpack",
        description="Build, gate and ship CUDA kernels inside Python/PyTorch packages.",
    )
    parser.add_argument("--version", action="version", version=f"kernelpack {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb in _VERBS:
        try:
            module = importlib.import_module(f"kernelpack.cli.{verb}")
        except ModuleNotFoundError as exc:
            if exc.name == f"kernelpack.cli.{verb}":
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit code (also used by the console script).

    SIGTERM and SIGHUP stop a verb as Ctrl-C does (a build stops ninja and the compilers and
    removes its temporary files); the exit code is then 128 + the signal.
    """
    try:
        with raise_on_signals():
            return _main(argv)
    except KeyboardInterrupt as exc:  # while the verbs are imported, or after the verb returned
        print("kernelpack: interrupted", file=sys.stderr)
        return _interrupted_code(exc)


def _main(argv: Sequence[str] | None) -> int:
    parser = _parser()  # imports every verb: a stop signal here is main()'s to report
    args = parser.parse_args(argv)
    try:
        code = int(args.func(args))
    except KernelpackError as exc:
        print(f"kernelpack {args.verb}: error: {exc}", file=sys.stderr)
        _json_error(args, str(exc), exc.exit_code)
        return exc.exit_code
    except OSError as exc:  # a full disk, a vanished folder: the system's words, one line
        where = f"{exc.filename}: " if exc.filename else ""
        message = f"{where}{exc.strerror or exc}"
        print(f"kernelpack {args.verb}: error: {message}", file=sys.stderr)
        _json_error(args, message, 1)
        return 1
    except KeyboardInterrupt as exc:
        print(f"kernelpack {args.verb}: interrupted", file=sys.stderr)
        return _interrupted_code(exc)
    return code


def _interrupted_code(exc: KeyboardInterrupt) -> int:
    """128 + the signal that stopped the run: 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP."""
    return exc.exit_code if isinstance(exc, Interrupted) else 128 + signal.SIGINT


def _json_error(args: argparse.Namespace, message: str, code: int) -> None:
    """Under `--json`, the failure as JSON on stdout too: tools never parse an empty string."""
    if getattr(args, "json", False):
        print(json.dumps({"error": {"message": message, "exit_code": code}}))


if __name__ == "__main__":
    sys.exit(main())
