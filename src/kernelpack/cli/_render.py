"""The end-of-build summary: each kernel's outcome and the per-file compile times."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from kernelpack.builder.engine import BuildResult

__all__ = ["print_summary"]


def print_summary(result: BuildResult, console: Console) -> None:
    """Print the kernels table and, when anything ran, the steps by wall time."""
    kernels = Table(title=f"{result.record.package} {result.record.version}", title_justify="left")
    kernels.add_column("kernel")
    kernels.add_column("status")
    kernels.add_column("abi / archs / reason")
    for name, record in result.record.kernels.items():
        if record.built:
            detail = f"{record.abi}  {' '.join(record.archs)}  {record.library}"
            kernels.add_row(name, "[green]built[/]", detail)
        else:
            assert record.reason is not None
            reason = f"{record.reason.code}: {record.reason.message}"
            kernels.add_row(name, "[yellow]skipped[/]", reason)
    console.print(kernels)
    if not result.steps:
        console.print(f"nothing to do: every library is up to date ({result.seconds:.2f} s)")
        return
    steps = Table(title="steps run (wall time)", title_justify="left")
    steps.add_column("step")
    steps.add_column("output")
    steps.add_column("seconds", justify="right")
    for step in sorted(result.steps, key=lambda s: -s.seconds):
        steps.add_row(step.tool, step.output, f"{step.seconds:.1f}")
    console.print(steps)
    console.print(
        f"{len(result.compiled)} compiled, {len(result.steps) - len(result.compiled)} linked "
        f"in {result.seconds:.1f} s"
    )
