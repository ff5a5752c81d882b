"""`kernelpack status PKG [--json]`: which kernels of an installed package are usable here.

PKG is an importable package name, or a package folder (its parent is put on `sys.path`).
Nothing is built or compiled: this is the registry's view of the build record on this machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from kernelpack.errors import KernelpackError, UsageError
from kernelpack_runtime.registry import registry_for
from kernelpack_runtime.status import PackageStatus

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["register", "run", "table"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `status` verb."""
    parser = subparsers.add_parser(
        "status",
        help="which kernels of a package are usable on this machine, and why not",
        description="Show the run-time status of every kernel of an installed package.",
    )
    parser.add_argument("package", metavar="PKG", help="a package name or a package folder")
    parser.add_argument("--json", action="store_true", help="print the status as JSON")
    parser.set_defaults(func=run)


def _package_name(text: str) -> str:
    folder = Path(text)
    if folder.is_dir() and (folder / "__init__.py").is_file():
        sys.path.insert(0, str(folder.resolve().parent))
        return folder.resolve().name
    if not all(part.isidentifier() for part in text.split(".")):
        raise UsageError(f"{text}: not a package name, nor a package folder")
    return text


def run(args: argparse.Namespace) -> int:
    """Print the status table (or JSON); exit 2 for an unknown package, 1 without a record."""
    package = _package_name(args.package)
    registry = registry_for(package)
    if registry.location is None:
        raise UsageError(f"{package}: no such package for {sys.executable}")
    if registry.record is None:
        raise KernelpackError(registry.record_problem or f"{package}: no build record")
    report = PackageStatus.of(registry)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        from kernelpack.cli import _render
        from kernelpack_runtime.device import default_probe

        caption = f"device {default_probe().describe()}"
        _render.print_table(_render.console(), table(report, caption=caption))
    return 0


def table(report: PackageStatus, caption: str | None = None) -> Table:
    """A rich `Table`: kernel, available, archs, abi, reason."""
    from rich.table import Table

    title = f"{report.package} {report.version or ''}".strip()
    result = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
    for column in ("kernel", "available", "archs", "abi", "reason"):
        result.add_column(column, overflow="fold")
    for kernel in report.kernels:
        reason = kernel.reason
        result.add_row(
            kernel.name,
            "[green]yes[/green]" if kernel.available else "[red]no[/red]",
            " ".join(kernel.archs) or "-",
            kernel.abi or "-",
            f"{reason.code}: {reason.message}" if reason is not None else "-",
        )
    return result
