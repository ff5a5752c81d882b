"""`kernelpack doctor [PATH] [--json] [--allow-nearest]`: the toolchain, and a package's plan.

Prints what `kernelpack.toolchain.detection.detect()` found (nvcc, CUDA_HOME, torch and its CUDA and
ABI, the nvidia wheel headers, the compiler launcher, the job budget) and, when PATH names a
kernel package, every kernel's decision: built for which archs with which `-gencode` flags,
or skipped with its reason. Without a package in PATH it still prints the toolchain.

Exit status: 0, or 2 when PATH is given but holds no package or the manifest is invalid (one
line, nothing else printed), or when the plan cannot be carried out here (`BuildPlan.problems()`:
a skip under `*_REQUIRE`, torch missing, a `cxx-std` torch's headers reject; or a `depends`
whose headers are not installed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kernelpack.builder.graph import Pools
from kernelpack.cli import _render
from kernelpack.errors import ManifestError, PlanError, UsageError
from kernelpack.plan import BuildPlan, KernelPlan, plan_project
from kernelpack.project.locate import PATH_HELP, Project, locate
from kernelpack.toolchain.deps import ALLOW_NEAREST_HELP, allowing_nearest
from kernelpack.toolchain.detection import Toolchain, detect

__all__ = ["Report", "register", "run", "to_json"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `doctor` verb."""
    parser = subparsers.add_parser(
        "doctor",
        help="show the toolchain and a package's build plan with every skip reason",
        description="Show nvcc, CUDA_HOME, torch, launcher and jobs, and, given a kernel "
        "package, which kernels would be built (archs, -gencode flags) or skipped and why.",
    )
    parser.add_argument("path", nargs="?", type=Path, metavar="PATH", help=PATH_HELP)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--allow-nearest", action="store_true", help=ALLOW_NEAREST_HELP)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Locate and load the package, detect, plan, print.

    Bad input (a PATH that names no package, an invalid manifest or selection) raises a
    `UsageError` (one line, exit 2) before anything is printed or detected; a package whose
    plan cannot be carried out is reported and returns 2.
    """
    project, no_package = _locate(args.path)
    if project is None:
        toolchain, report = detect(), None
    else:
        if project.found:
            print(f"kernelpack doctor: using {project.found}", file=sys.stderr)
        environ = allowing_nearest(os.environ) if args.allow_nearest else None
        plan = plan_project(project, environ, strict=False)
        toolchain, report = plan.toolchain, Report(project, plan)
    if args.json:
        print(json.dumps(to_json(toolchain, report), indent=2))
    else:
        _show(toolchain, report, no_package)
    return PlanError.exit_code if report is not None and report.problems else 0


def _locate(path: Path | None) -> tuple[Project | None, UsageError | None]:
    """The package PATH names; without PATH, no package in the current folder is no error."""
    try:
        return locate(path), None
    except ManifestError:
        raise
    except UsageError as exc:
        if path is not None:
            raise
        return None, exc


@dataclass(frozen=True)
class Report:
    """A package's plan, as `plan_project` decided it on this machine."""

    project: Project
    plan: BuildPlan

    @property
    def include_dirs(self) -> Mapping[str, tuple[Path, ...]]:
        """Kernel to build -> the include folders of its `depends` found on this machine."""
        return {k.name: k.dep_include_dirs for k in self.plan.to_build}

    @property
    def problems(self) -> tuple[str, ...]:
        """`BuildPlan.problems()`: what stops the build here, one line each."""
        return self.plan.problems()

    @property
    def version(self) -> str:
        return self.plan.version


def to_json(toolchain: Toolchain, report: Report | None) -> dict[str, Any]:
    """`{"toolchain": {...}, "package": name|null, "kernels": {name: {"decision", "reason",
    "archs", "gencode", ...}}, "problems": [...]}`."""
    if report is None:
        unknown = dict.fromkeys(("package", "manifest", "version"))
        return {"toolchain": toolchain.to_json(), **unknown, "kernels": {}, "problems": []}
    return {
        "toolchain": toolchain.to_json(),
        "package": report.project.package,
        "manifest": str(report.project.manifest_path),
        "version": report.version,
        "kernels": {
            k.name: _kernel_json(k, report.include_dirs.get(k.name, ()))
            for k in report.plan.kernels
        },
        "problems": list(report.problems),
    }


def _kernel_json(kernel: KernelPlan, include_dirs: tuple[Path, ...]) -> dict[str, Any]:
    return {
        "decision": "build" if kernel.build else "skip",
        "reason": None if kernel.skip is None else kernel.skip.to_json(),
        "abi": kernel.spec.abi,
        "archs": [str(arch) for arch in kernel.archs],
        "gencode": list(kernel.gencode_flags),
        "cxx_std": kernel.cxx_std if kernel.build else None,
        "depends": list(kernel.spec.depends),
        "depends_include_dirs": [str(d) for d in include_dirs],
        "parts": {
            part.name: {"archs": [str(a) for a in part.archs], "gencode": list(part.gencode_flags)}
            for part in kernel.parts
        },
        "left_out": list(kernel.left_out),
    }


def _show(toolchain: Toolchain, report: Report | None, no_package: UsageError | None) -> None:
    _print(_render.console(), toolchain, report, no_package)


def _print(
    console: Console, toolchain: Toolchain, report: Report | None, no_package: UsageError | None
) -> None:
    console.print(Text("Toolchain", style="bold"))
    _render.print_table(console, _toolchain_table(toolchain))
    if no_package is not None:
        console.print(Text(f"\nNo kernel package: {no_package}", style="yellow"))
    if report is None:
        return
    result = report.plan
    built, skipped = len(result.to_build), len(result.skipped)
    console.print(
        Text.assemble(
            ("\n" + report.project.package, "bold"),
            f" ({_shown(report.project.manifest_path)}): {built} to build, {skipped} skipped; "
            f"version {report.version}",
        )
    )
    _render.print_table(console, _plan_table(result))
    for line in report.problems:
        console.print(Text(f"error: {line}", style="red"))


def _toolchain_table(toolchain: Toolchain) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="cyan", no_wrap=True)
    table.add_column(overflow="fold")
    if toolchain.nvcc is not None and toolchain.nvcc_missing is None:
        nvcc = Text(f"{toolchain.nvcc_version} at {toolchain.nvcc}")
    else:
        nvcc = _missing(toolchain.nvcc_missing.message if toolchain.nvcc_missing else "")
    table.add_row("nvcc", nvcc)
    table.add_row("CUDA_HOME", str(toolchain.cuda_home or "-"))
    table.add_row("toolkit", f"{toolchain.toolkit or 'none'}: {toolchain.toolkit_why or '-'}")
    sms = sorted((t for t in toolchain.nvcc_targets if t.startswith("sm_")), key=_sm_key)
    table.add_row("archs", " ".join(sms) or "-")
    if toolchain.torch_missing is None:
        cuda = f"CUDA {toolchain.torch_cuda}" if toolchain.torch_cuda else "CPU-only"
        abi = "cxx11 ABI" if toolchain.cxx11_abi else "pre-cxx11 ABI"
        table.add_row(
            "torch", f"{toolchain.torch_version} ({cuda}, {abi}) at {toolchain.torch_dir}"
        )
    else:
        table.add_row("torch", _missing(toolchain.torch_missing))
    table.add_row("nvidia headers", "\n".join(str(p) for p in toolchain.nvidia_include_dirs) or "-")
    launcher = str(toolchain.launcher or "none")
    if toolchain.launcher_why:
        launcher += f" ({toolchain.launcher_why})"
    table.add_row("launcher", launcher)
    table.add_row("jobs", _jobs_text(toolchain))
    table.add_row("python", f"{toolchain.python} on {toolchain.machine}")
    return table


def _plan_table(result: BuildPlan) -> Table:
    table = Table()
    table.add_column("kernel", style="bold", no_wrap=True)
    table.add_column("decision", no_wrap=True)
    table.add_column("abi", no_wrap=True)
    table.add_column("archs")
    table.add_column("details", overflow="fold")
    for kernel in result.kernels:
        archs = ", ".join(str(arch) for arch in kernel.archs) or "-"
        if kernel.skip is None:
            decision = Text("build", style="green")
            parts = [
                f"{part.name}: {', '.join(str(a) for a in part.archs) or '-'}"
                for part in kernel.parts
            ]
            left_out = [f"left out: {line}" for line in kernel.left_out]
            lines = [f"C++{kernel.cxx_std}", *kernel.gencode_flags, *parts, *left_out]
            details = Text("\n".join(lines))
        else:
            decision = Text("skip", style="yellow")
            details = Text(f"{kernel.skip.code}: {kernel.skip.message}")
        table.add_row(kernel.name, decision, kernel.spec.abi, archs, details)
    return table


def _missing(message: str) -> Text:
    return Text(f"missing: {message}", style="red")


def _sm_key(target: str) -> tuple[int, str]:
    rest = target.removeprefix("sm_")
    digits = rest.rstrip("af")
    return (int(digits) if digits.isdigit() else 0, rest[len(digits) :])


def _shown(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


def _jobs_text(toolchain: Toolchain) -> str:
    """`2; 23.1 GiB free: 2 ATen / 2 header-only compiles at once` (the build's pools)."""
    pools = Pools.for_memory(toolchain.jobs, toolchain.memory)
    if toolchain.memory is None:
        return f"{toolchain.jobs} (memory unknown)"
    free = toolchain.memory / 1024**3
    return (
        f"{toolchain.jobs}; {free:.1f} GiB free: {pools.heavy} ATen / {pools.light} "
        "header-only compiles at once"
    )
