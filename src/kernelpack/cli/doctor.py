"""`kernelpack doctor [PATH] [--json]`: the toolchain, and a package's build plan.

Prints what `kernelpack.toolchain.detect()` found (nvcc, CUDA_HOME, torch and its CUDA and
ABI, the nvidia wheel headers, the compiler launcher, the job budget) and, when PATH names a
kernel package, every kernel's decision: built for which archs with which `-gencode` flags,
or skipped with its reason. Without a package in PATH it still prints the toolchain.

Exit status: 0, or 2 when PATH is given but holds no package, the manifest is invalid, or the
plan cannot be carried out (`BuildPlan.problems()`: a skip under `*_REQUIRE`, torch missing,
a `cxx-std` torch's headers reject).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kernelpack.errors import PlanError, UsageError
from kernelpack.plan import BuildPlan, KernelPlan, Selection, decide
from kernelpack.project import Project, locate
from kernelpack.toolchain import Toolchain, detect

__all__ = ["register", "run", "to_json"]

_PIPE_WIDTH = 160


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `doctor` verb."""
    parser = subparsers.add_parser(
        "doctor",
        help="show the toolchain and a package's build plan with every skip reason",
        description="Show nvcc, CUDA_HOME, torch, launcher and jobs, and, given a kernel "
        "package, which kernels would be built (archs, -gencode flags) or skipped and why.",
    )
    parser.add_argument(
        "path",
        nargs="?",
        type=Path,
        help="a kernels.toml, a package folder holding one, or a project folder whose "
        "pyproject.toml has [tool.kernelpack] (default: the current folder)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Detect, plan, print. Bad input raises `UsageError` (exit 2) after the toolchain is
    printed; a package with plan problems returns 2."""
    toolchain = detect()
    project: Project | None = None
    result: BuildPlan | None = None
    missing: UsageError | None = None
    invalid: UsageError | None = None
    try:
        project = locate(args.path)
    except UsageError as exc:
        missing = exc
    if project is not None:
        try:
            manifest = project.load_manifest(allow_missing_sources=True)
            result = decide(manifest, toolchain, Selection.from_env(project.env_prefix, os.environ))
        except UsageError as exc:
            invalid = exc
    if args.json:
        print(json.dumps(to_json(toolchain, project, result), indent=2))
    else:
        console = Console(highlight=False)
        if not console.is_terminal:
            console.width = max(console.width, _PIPE_WIDTH)  # keep paths and flags on one line
        # An explicit PATH without a package, or a bad manifest, is raised below instead.
        _print(console, toolchain, project, result, missing if args.path is None else None)
    if invalid is not None:
        raise invalid
    if missing is not None and args.path is not None:
        raise missing
    if result is not None and result.problems():
        return PlanError.exit_code
    return 0


def to_json(
    toolchain: Toolchain, project: Project | None, result: BuildPlan | None
) -> dict[str, Any]:
    """`{"toolchain": {...}, "package": name|null, "kernels": {name: {"decision", "reason",
    "archs", "gencode", ...}}, "problems": [...]}`."""
    return {
        "toolchain": toolchain.to_json(),
        "package": None if project is None else project.package,
        "manifest": None if project is None else str(project.manifest_path),
        "version": None if project is None or result is None else _version(project, result),
        "kernels": {} if result is None else {k.name: _kernel_json(k) for k in result.kernels},
        "problems": [] if result is None else list(result.problems()),
    }


def _kernel_json(kernel: KernelPlan) -> dict[str, Any]:
    return {
        "decision": "build" if kernel.build else "skip",
        "reason": None if kernel.skip is None else kernel.skip.to_json(),
        "abi": kernel.spec.abi,
        "archs": [str(arch) for arch in kernel.archs],
        "gencode": list(kernel.gencode_flags),
        "cxx_std": kernel.cxx_std if kernel.build else None,
    }


def _version(project: Project, result: BuildPlan) -> str:
    return f"{project.version}+{result.version_tag()}"


def _print(
    console: Console,
    toolchain: Toolchain,
    project: Project | None,
    result: BuildPlan | None,
    no_package: UsageError | None,
) -> None:
    console.print(Text("Toolchain", style="bold"))
    console.print(_toolchain_table(toolchain))
    if no_package is not None:
        console.print(Text(f"\nNo kernel package: {no_package}", style="yellow"))
    if project is None or result is None:
        return
    built, skipped = len(result.to_build), len(result.skipped)
    console.print(
        Text.assemble(
            ("\n" + project.package, "bold"),
            f" ({_shown(project.manifest_path)}): {built} to build, {skipped} skipped; "
            f"version {_version(project, result)}",
        )
    )
    console.print(_plan_table(result))
    for line in result.problems():
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
    table.add_row("launcher", str(toolchain.launcher or "none"))
    table.add_row("jobs", str(toolchain.jobs))
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
            details = Text("\n".join([f"C++{kernel.cxx_std}", *kernel.gencode_flags]))
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
