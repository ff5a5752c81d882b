"""`kernelpack status PKG|PATH [--json] [--require]`: which kernels of a package are usable here.

PKG is an importable package name, a package folder, a `kernels.toml`, or the project folder
that `build` and `check` accept (see `kernelpack.project.locate.locate_package`). Nothing is
built or compiled: this is the registry's view of the build record on this machine. For an in-place
build (the package folder holds its `kernels.toml` and no wheel installed it), each built
kernel's recorded `sources_sha256` is compared with its sources now, and a kernel edited since
is flagged. `--json` says which it is (`"install": "wheel"` or `"in-place"`), and prints an
`{"error": ...}` object on stdout when it fails.

Exit 0 with a report; 1 when the package has no usable build record, or, under `--require`,
when any kernel is unavailable; 2 for a PKG that names no package.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from kernelpack.errors import KernelpackError, UsageError
from kernelpack.project.locate import MANIFEST_NAME, PACKAGE_HELP, locate, locate_package
from kernelpack_runtime.record import FILENAME as RECORD_FILENAME
from kernelpack_runtime.record import BuildRecord, BuiltKernel
from kernelpack_runtime.registry import registry_for
from kernelpack_runtime.status import COLUMNS, PackageStatus

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["register", "run", "sources_changed", "table"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `status` verb."""
    parser = subparsers.add_parser(
        "status",
        help="which kernels of a package are usable on this machine, and why not",
        description="Show the run-time status of every kernel of a built package.",
    )
    parser.add_argument("package", metavar="PKG|PATH", help=PACKAGE_HELP)
    parser.add_argument("--json", action="store_true", help="print the status as JSON")
    parser.add_argument(
        "--require", action="store_true", help="exit 1 when any kernel is unavailable"
    )
    parser.set_defaults(func=run)


def installed_from_wheel(package_dir: Path) -> bool:
    """Whether `package_dir` was installed from a wheel: a `.dist-info` beside it lists the
    package's build record in its RECORD (an in-place build, editable or not, has none)."""
    member = f"{package_dir.name}/{RECORD_FILENAME},"
    for info in package_dir.parent.glob("*.dist-info"):
        try:
            text = (info / "RECORD").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if any(line.startswith(member) for line in text.splitlines()):
            return True
    return False


def sources_changed(record: BuildRecord, package_dir: Path) -> dict[str, bool]:
    """Built kernel -> whether its sources differ from those it was built from.

    Only for a package folder holding its `kernels.toml` (an in-place build); empty otherwise
    (a wheel ships `kernels.toml` without the sources), or when the manifest cannot be read
    (`kernelpack check` says why).
    """
    if not (package_dir / MANIFEST_NAME).is_file() or installed_from_wheel(package_dir):
        return {}
    from kernelpack.builder.outputs import sources_sha256

    try:
        manifest = locate(package_dir / MANIFEST_NAME).load_manifest(allow_missing_sources=True)
        specs = {spec.name: spec for spec in manifest.kernels}
        changed = {}
        for name, entry in record.kernels.items():
            spec = specs.get(name)
            if isinstance(entry, BuiltKernel) and entry.sources_sha256 and spec is not None:
                changed[name] = sources_sha256(spec, package_dir) != entry.sources_sha256
        return changed
    except (KernelpackError, OSError):
        return {}


def run(args: argparse.Namespace) -> int:
    """Print the status table (or JSON); exit codes as in the module docstring."""
    package = locate_package(args.package)
    registry = registry_for(package)
    location = registry.location
    if location is None:
        raise UsageError(f"{package}: no such package for {sys.executable}")
    record = registry.record
    if record is None and not registry.record_invalid:
        raise KernelpackError(registry.record_problem or f"{package}: no build record")
    report = PackageStatus.of(registry)
    changed = sources_changed(record, location) if record is not None else {}
    if args.json:
        data = report.to_json()
        data["install"] = "wheel" if installed_from_wheel(location) else "in-place"
        for name, edited in changed.items():
            data["kernels"][name]["sources_changed"] = edited
        print(json.dumps(data, indent=2))
    elif report.kernels:
        from kernelpack.cli import _render
        from kernelpack_runtime.device import default_probe

        caption = f"device {default_probe().describe()}"
        _render.print_table(_render.console(), table(report, caption=caption))
    for name in (name for name, edited in changed.items() if edited):
        print(
            f"kernelpack status: {name}: sources changed since this in-place build; "
            "rebuild with `kernelpack build --inplace`",
            file=sys.stderr,
        )
    if registry.record_invalid:
        print(f"kernelpack status: error: {registry.record_problem}", file=sys.stderr)
        return 1
    if args.require and not all(kernel.available for kernel in report.kernels):
        unavailable = ", ".join(k.name for k in report.kernels if not k.available)
        print(f"kernelpack status: unavailable under --require: {unavailable}", file=sys.stderr)
        return 1
    return 0


def table(report: PackageStatus, caption: str | None = None) -> Table:
    """A rich `Table` of `report.rows()` (the rows `python -m kernelpack_runtime status`
    prints as plain text): kernel, available, archs, abi, reason."""
    from rich.markup import escape
    from rich.table import Table

    result = Table(
        title=report.title, title_justify="left", caption=caption, caption_justify="left"
    )
    for column in COLUMNS:
        result.add_column(column, overflow="fold")
    for name, available, archs, abi, reason in report.rows():
        shown = "[green]yes[/green]" if available == "yes" else "[red]no[/red]"
        result.add_row(name, shown, archs, abi, escape(reason))
    return result
